// Runs one function of a compiled IREE module (a .vmfb) through IREE's VM on a device of any driver
// in IREE's default registry, as iree-run-module does, timing each call.

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iree/hal/api.h"
#include "iree/runtime/api.h"

typedef struct {
  size_t rank;
  int64_t shape[8];
  const float* data;  // inputs: the values; outputs: malloc'd, freed by thal_iree_tensor_free
  size_t element_count;
} thal_iree_tensor_t;

void thal_iree_tensor_free(thal_iree_tensor_t* tensor) {
  free((void*)tensor->data);
  tensor->data = NULL;
}

// Makes a device buffer view of each input once: every call then pushes the same views, as
// iree-benchmark-module does, so a call's time is the call's alone.
static iree_status_t make_inputs(iree_runtime_session_t* session, const thal_iree_tensor_t* inputs,
                                 size_t input_count, iree_hal_buffer_view_t** views) {
  iree_hal_device_t* device = iree_runtime_session_device(session);
  iree_hal_allocator_t* allocator = iree_runtime_session_device_allocator(session);
  for (size_t i = 0; i < input_count; ++i) {
    const thal_iree_tensor_t* input = &inputs[i];
    iree_hal_dim_t shape[8];
    if (input->rank > 8) return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "input %zu has rank %zu (at most 8)", i, input->rank);
    for (size_t d = 0; d < input->rank; ++d) shape[d] = (iree_hal_dim_t)input->shape[d];
    iree_hal_buffer_params_t params = {0};
    params.type = IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL;
    params.usage = IREE_HAL_BUFFER_USAGE_DEFAULT;
    IREE_RETURN_IF_ERROR(iree_hal_buffer_view_allocate_buffer_copy(
        device, allocator, input->rank, shape, IREE_HAL_ELEMENT_TYPE_FLOAT_32, IREE_HAL_ENCODING_TYPE_DENSE_ROW_MAJOR,
        params, iree_make_const_byte_span(input->data, input->element_count * sizeof(float)), &views[i]));
  }
  return iree_ok_status();
}

static iree_status_t push_inputs(iree_runtime_call_t* call, iree_hal_buffer_view_t** views, size_t input_count) {
  for (size_t i = 0; i < input_count; ++i) {
    IREE_RETURN_IF_ERROR(iree_runtime_call_inputs_push_back_buffer_view(call, views[i]));
  }
  return iree_ok_status();
}

// The CPU time of every thread of the process so far, in nanoseconds.
static int64_t process_cpu_ns(void) {
  struct timespec now;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now) != 0) return 0;
  return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static iree_status_t pop_outputs(iree_hal_device_t* device, iree_runtime_call_t* call, thal_iree_tensor_t* outputs,
                                 size_t output_capacity, size_t* output_count) {
  *output_count = 0;
  while (iree_vm_list_size(iree_runtime_call_outputs(call)) > 0) {
    iree_hal_buffer_view_t* view = NULL;
    IREE_RETURN_IF_ERROR(iree_runtime_call_outputs_pop_front_buffer_view(call, &view));
    iree_status_t status = iree_ok_status();
    if (*output_count >= output_capacity) {
      status = iree_make_status(IREE_STATUS_OUT_OF_RANGE, "more than %zu outputs", output_capacity);
    } else if (iree_hal_buffer_view_element_type(view) != IREE_HAL_ELEMENT_TYPE_FLOAT_32) {
      status = iree_make_status(IREE_STATUS_UNIMPLEMENTED, "output %zu is not f32", *output_count);
    }
    thal_iree_tensor_t* out = &outputs[*output_count];
    if (iree_status_is_ok(status)) {
      out->rank = iree_hal_buffer_view_shape_rank(view);
      if (out->rank > 8) status = iree_make_status(IREE_STATUS_OUT_OF_RANGE, "an output of rank %zu", out->rank);
    }
    if (iree_status_is_ok(status)) {
      for (size_t d = 0; d < out->rank; ++d) out->shape[d] = (int64_t)iree_hal_buffer_view_shape_dim(view, d);
      out->element_count = iree_hal_buffer_view_element_count(view);
      float* data = (float*)malloc(out->element_count * sizeof(float) + 1);
      if (!data) status = iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED, "output of %zu floats", out->element_count);
      if (iree_status_is_ok(status)) {
        // A transfer, not a mapping: device-local memory is not host-visible, and IREE stages it.
        status = iree_hal_device_transfer_d2h(device, iree_hal_buffer_view_buffer(view), 0, data,
                                              out->element_count * sizeof(float),
                                              IREE_HAL_TRANSFER_BUFFER_FLAG_DEFAULT, iree_infinite_timeout());
        if (iree_status_is_ok(status)) {
          out->data = data;
          ++*output_count;
        } else {
          free(data);
        }
      }
    }
    iree_hal_buffer_view_release(view);
    IREE_RETURN_IF_ERROR(status);
  }
  return iree_ok_status();
}

// Loads `module` (the bytes of a .vmfb) on the default device of `driver` and calls `function`
// (e.g. "module.main") `repeat` times with `inputs`, writing each call's nanoseconds to `call_ns`,
// the CPU time every thread of the process spent during it to `cpu_ns`, and the last call's
// outputs to `outputs`. `inputs_per_call`: the input buffers are made again before each call
// (outside its time), as a program that uploads fresh inputs every call does.
iree_status_t thal_iree_run_module(const char* driver, const void* module, size_t module_length, const char* function,
                                   const thal_iree_tensor_t* inputs, size_t input_count, int inputs_per_call,
                                   size_t repeat, int64_t* call_ns, int64_t* cpu_ns, thal_iree_tensor_t* outputs, size_t output_capacity,
                                   size_t* output_count) {
  *output_count = 0;
  iree_allocator_t host_allocator = iree_allocator_system();
  iree_runtime_instance_options_t instance_options;
  iree_runtime_instance_options_initialize(&instance_options);
  iree_runtime_instance_options_use_all_available_drivers(&instance_options);
  iree_runtime_instance_t* instance = NULL;
  IREE_RETURN_IF_ERROR(iree_runtime_instance_create(&instance_options, host_allocator, &instance));

  iree_hal_device_t* device = NULL;
  iree_runtime_session_t* session = NULL;
  iree_runtime_call_t call;
  bool call_made = false;
  iree_status_t status = iree_runtime_instance_try_create_default_device(instance, iree_make_cstring_view(driver), &device);
  if (iree_status_is_ok(status)) {
    iree_runtime_session_options_t session_options;
    iree_runtime_session_options_initialize(&session_options);
    status = iree_runtime_session_create_with_device(instance, &session_options, device,
                                                     iree_runtime_instance_host_allocator(instance), &session);
  }
  if (iree_status_is_ok(status)) {
    status = iree_runtime_session_append_bytecode_module_from_memory(
        session, iree_make_const_byte_span(module, module_length), iree_allocator_null());
  }
  if (iree_status_is_ok(status)) {
    status = iree_runtime_call_initialize_by_name(session, iree_make_cstring_view(function), &call);
    call_made = iree_status_is_ok(status);
  }
  iree_hal_buffer_view_t** views = NULL;
  if (iree_status_is_ok(status) && input_count > 0) {
    views = (iree_hal_buffer_view_t**)calloc(input_count, sizeof(*views));
    if (!views) status = iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED, "%zu input views", input_count);
  }
  if (iree_status_is_ok(status)) status = make_inputs(session, inputs, input_count, views);
  for (size_t r = 0; r < repeat && iree_status_is_ok(status); ++r) {
    iree_runtime_call_reset(&call);
    if (inputs_per_call && r > 0) {
      for (size_t i = 0; i < input_count; ++i) {
        iree_hal_buffer_view_release(views[i]);
        views[i] = NULL;
      }
      status = make_inputs(session, inputs, input_count, views);
    }
    if (iree_status_is_ok(status)) status = push_inputs(&call, views, input_count);
    int64_t cpu_start = process_cpu_ns();
    iree_time_t start = iree_time_now();
    if (iree_status_is_ok(status)) status = iree_runtime_call_invoke(&call, 0);
    call_ns[r] = iree_time_now() - start;
    cpu_ns[r] = process_cpu_ns() - cpu_start;
  }
  for (size_t i = 0; views && i < input_count; ++i) {
    if (views[i]) iree_hal_buffer_view_release(views[i]);
  }
  free(views);
  if (iree_status_is_ok(status)) status = pop_outputs(device, &call, outputs, output_capacity, output_count);
  if (call_made) iree_runtime_call_deinitialize(&call);
  iree_runtime_session_release(session);
  iree_hal_device_release(device);
  iree_runtime_instance_release(instance);
  return status;
}
