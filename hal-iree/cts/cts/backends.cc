// What the CTS may expect of each driver it knows: its capability tags (which gate whole suites) and
// the cases it skips, each with the reason, in the two kinds IREE's own backends use:
//   - unsupported: the driver cannot ever do what the case checks (a permanent, categorical gap);
//   - expected failure (xfail): it should, but does not yet. Run with IREE_CTS_VERIFY_XFAILS=1 to
//     run these too and to fail on the ones that now pass, so stale entries get removed.
// Patterns match "TestClass.Method" with `*` and `?`. A driver not listed here gets no tags and no
// skips; IREE_CTS_TAGS (see entry.h) replaces any driver's tags for one run.
//
// Tags, as the CTS uses them:
//   async_queue  queue operations return before the work runs (SemaphoreSubmissionTest,
//                AsyncTransientBufferTest);
//   file_io      queue_read/queue_write on HAL files (FileTest);
//   indirect     command buffers with binding tables (the CTS_Indirect instantiations);
//   events, host_calls, mapping: declared by IREE's CPU drivers; no suite in this CTS version is
//                gated on them, they are kept so our lists read like IREE's.

#include "backends.h"

namespace thal::iree_cts {

namespace {

// IREE's synchronous CPU driver: everything runs inline at submission, so no operation can be
// queued behind a wait that is not yet satisfied, and queue-ordered allocation is a plain heap one.
DriverProfile LocalSyncProfile() {
  const char* blocks_on_waits =
      "local-sync waits for the operation's wait semaphores inside the submitting call, so it cannot "
      "accept work that waits on a value signalled later (wait-before-signal)";
  const char* synchronous_pool =
      "local-sync allocates through the synchronous pool helper and frees reservations at once (no "
      "death frontier), so the pool never reports the in-flight reuse this case checks";
  return {
      "local-sync",
      {"events", "file_io", "host_calls", "mapping", "indirect"},
      {
          {"QueueAllocaTest.BufferMetadata",
           "queue_alloca returns a plain heap buffer: there is no asynchronous placement to report"},
          {"QueueAllocaTest.DeallocaReleasesMemory",
           "queue_dealloca only orders (a barrier): the heap buffer stays valid until its last "
           "reference goes"},
          {"QueueAllocaTest.ExplicitFixedBlockPoolCrossQueueWaitFrontier", synchronous_pool},
          {"QueueAllocaTest.ExplicitFixedBlockPoolPendingDeallocaWaitFrontier", synchronous_pool},
          {"QueueAllocaTest.ExplicitFixedBlockPoolRequiresWaitFrontierFlag", synchronous_pool},
          {"QueueAllocaTest.ExplicitTLSFPoolCrossQueueStaleBlockGrows", synchronous_pool},
          {"QueueAllocaTest.ExplicitFixedBlockPoolNotificationRetry", synchronous_pool},
          {"QueueAllocaTest.AllocaWithWaitSemaphores", blocks_on_waits},
          {"QueueTransferTest.UpdateCapturesSourceBeforeWaitResolves", blocks_on_waits},
          {"QueueDispatchTest.DeferredNoopDispatch", blocks_on_waits},
          {"QueueDispatchTest.DeferredWaitBeforeSignalDispatch", blocks_on_waits},
          {"DispatchReuseTest.DeferredExecuteRetainsDispatchBindingTable", blocks_on_waits},
      },
      {},
  };
}

// IREE's task-system CPU driver: asynchronous queues, nothing skipped upstream.
DriverProfile LocalTaskProfile() {
  return {"local-task", {"async_queue", "events", "file_io", "host_calls", "mapping", "indirect"}, {}, {}};
}

// Our cpu-sim device behind IREE's HAL (crate hal-iree). Our queues are asynchronous timelines.
// "file_io": files over host allocations are memory files whose reads and writes are queue copies;
// files over descriptors are staged through host-visible memory by a host call on the queue. The
// expected failures are what hal-iree does not do yet (see hal-iree/README.md).
DriverProfile ThalCpuSimProfile() {
  const char* no_pool_notification_wait =
      "an alloca that finds its pool exhausted fails with RESOURCE_EXHAUSTED instead of waiting for "
      "the pool's notification: the HAL buffer of a queue operation is fixed when it is submitted, so "
      "the bridge cannot place the alloca later (see hal-iree/README.md)";
  return {
      "thal-cpu-sim",
      {"async_queue", "events", "file_io", "host_calls", "mapping", "indirect"},
      {},
      {
          {"QueueAllocaTest.ExplicitFixedBlockPoolNotificationRetry", no_pool_notification_wait},
      },
  };
}

// Our CUDA device behind IREE's HAL: the same bridge as thal-cpu-sim, so the same gaps; its
// executables are IREE's CUDA format (IREE_CTS_EXECUTABLE_FORMAT=PTXE, testdata/cts/executables-cuda).
DriverProfile ThalCudaProfile() {
  DriverProfile profile = ThalCpuSimProfile();
  profile.driver_name = "thal-cuda";
  return profile;
}

// Our Vulkan device behind IREE's HAL (lavapipe in CI): the same bridge as thal-cpu-sim; its
// executables are IREE's Vulkan format (IREE_CTS_EXECUTABLE_FORMAT=vulkan-spirv-fb,
// testdata/cts/executables-vulkan).
DriverProfile ThalVulkanProfile() {
  DriverProfile profile = ThalCudaProfile();
  profile.driver_name = "thal-vulkan";
  const char* unaligned_binding =
      "binds a buffer at byte offset 4: Vulkan needs storage-buffer bindings at multiples of "
      "minStorageBufferOffsetAlignment (16 on lavapipe and NVIDIA), and IREE's SPIR-V has no offset "
      "parameter to make up the difference (the HAL refuses the binding with the limit named); "
      "IREE's own vulkan backend instantiates no dispatch suites";
  for (const char* pattern : {"DispatchTest.DispatchAbs", "DispatchReuseTest.MixedDirectAndIndirectBindings",
                              "DispatchReuseTest.DeferredExecuteRetainsDispatchBindingTable"}) {
    profile.unsupported.push_back({pattern, unaligned_binding});
  }
  return profile;
}

}  // namespace

DriverProfile FindDriverProfile(const std::string& driver_name) {
  for (DriverProfile profile :
       {LocalSyncProfile(), LocalTaskProfile(), ThalCpuSimProfile(), ThalCudaProfile(), ThalVulkanProfile()}) {
    if (profile.driver_name == driver_name) return profile;
  }
  return {driver_name, {}, {}, {}};
}

}  // namespace thal::iree_cts
