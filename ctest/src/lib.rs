//! `ctest`: the HAL conformance test suite (CTS). Every driver must pass it; it is written once,
//! generic over any device, and checks each line of the contract every driver honours
//! (docs/contract.md states it, with docs/semaphores.md and docs/embedding.md for the details).
//!
//! - A driver supplies a [`Fixture`]: how to create its devices (a [`hal::Registry`] and a driver
//!   name, or a closure) and a [`KernelCatalogue`] giving the suite's [`Kernel`]s in its own format.
//!   cpu-sim's catalogue ([`kernels::native::NativeCatalogue`]) lives here; the CUDA sources
//!   ([`kernels::cuda`]) are here too, compiled by `driver-cuda` with NVRTC.
//! - The cases are functions of a [`Cx`] (the case's device and fixture), one file per area, listed
//!   once in `__cts_case_list!`: that list builds the [`CASES`] table and the tests that
//!   [`instantiate_cts!`] generates, one `#[test]` per case, named `<driver>::<area>::<case>`.
//! - After every case the runner checks each device the case used is back to idle (see
//!   [`runner::run_case`]); a case that leaks fails.
//! - [`runner::run_suite`] prints a table of case, result and time (what `hal cts` prints).
//!
//! ctest depends on no driver (so it publishes before them): each driver crate supplies its fixture,
//! e.g. cpu-sim's `driver_cpu_sim::cts::fixture()` behind its `cts` feature.
//!
//! ```no_run
//! // tests/cts.rs of a driver crate:
//! ctest::instantiate_cts!(cpu_sim, driver_cpu_sim::cts::fixture);
//! ```

pub mod check;
pub mod context;
pub mod fixture;
pub mod fuzz;
pub mod isolate;
pub mod kernels;
pub mod runner;

mod allocator;
mod binding_offsets;
mod binding_tables;
mod buffer_mapping;
mod collective;
mod command_buffer;
mod device;
mod dispatch;
mod executable;
mod failure;
mod host_io;
mod host_signal_only;
mod imported_memory;
mod indirect_dispatch;
mod interop;
mod kernel_abi;
mod misuse;
mod multi_device;
mod profiling;
mod queue_ops;
mod resources;
mod semaphore;
mod spirv_modules;
mod submission;
mod subspans;
mod transfers;
mod zero_sizes;

pub use check::{CaseError, CaseResult, Context as _};
pub use context::{Cx, LONG, SHORT, sv};
pub use fixture::Fixture;
pub use kernels::{Kernel, KernelCatalogue};
pub use runner::{Case, CaseReport, Outcome, Summary, run_case, run_suite, run_suite_with, run_test};

/// Every case, by area: the one list the case table and the instantiated tests come from. A case
/// function missing here is dead code (a warning, an error under `-D warnings`); a name here without
/// its function does not compile.
#[doc(hidden)]
#[macro_export]
macro_rules! __cts_case_list {
    ($($mode:tt)*) => {
        $crate::__cts_expand! {
            [$($mode)*]
            device {
                registry_lists_drivers,
                listing_matches_device,
                default_device,
                create_device_by_name,
                device_paths_select_devices,
                unknown_driver_unavailable,
                unknown_ordinal_out_of_range,
                properties,
                executable_formats_listed_and_loadable,
                queues_by_index,
                device_identity,
                idle_when_created,
                create_semaphore_initial_values,
                two_devices_work_independently,
            }
            allocator {
                every_memory_type_and_usage,
                over_max_resource_exhausted,
                huge_resource_exhausted,
                empty_params_invalid_argument,
                mapping_needs_host_visible,
                unoffered_memory_type_invalid_argument,
                odd_sizes,
                many_small_buffers,
                buffer_identity,
                large_buffer,
                memory_is_released,
            }
            buffer_mapping {
                write_read_whole,
                sub_range_write_read,
                map_sub_range,
                mapping_access_out_of_range,
                map_out_of_range,
                buffer_read_write_out_of_range,
                map_empty_at_end,
                map_device_local_refused,
                map_without_mapping_usage_refused,
                every_host_visible_type_maps,
                host_writes_visible_to_device,
                device_writes_visible_to_host,
                two_mappings_at_once,
                stale_mapping_after_dealloca,
            }
            command_buffer {
                empty_command_buffer,
                record_after_end_refused,
                end_twice_refused,
                execute_before_end_refused,
                one_shot_twice_refused,
                refused_execute_keeps_one_shot,
                reusable_executed_many_times,
                reusable_concurrent_on_queues,
                fill_1_byte_unaligned,
                fill_2_byte_unaligned,
                fill_4_byte_unaligned,
                fill_pattern_low_bytes_only,
                fill_misaligned_offset_refused,
                fill_misaligned_length_refused,
                fill_out_of_range_refused,
                transfer_usage_refused,
                update_sub_range,
                update_captures_data,
                update_out_of_range_refused,
                copy_whole,
                copy_sub_ranges,
                copy_same_buffer_disjoint,
                copy_same_buffer_overlap_refused,
                copy_out_of_range_refused,
                barrier_orders_transfers,
                other_device_buffer_refused,
                other_device_command_buffer_refused,
                large_fill,
                recorded_commands_listed,
                device_local_transfers,
                transfers_on_transient_buffers,
            }
            dispatch {
                fill_u32_constant,
                add_f32_bindings,
                scale_offset_constants,
                binding_offsets,
                bindings_share_a_buffer,
                wrong_binding_count_refused,
                wrong_constant_count_refused,
                unbounded_work_grid_beyond_limit_refused,
                entry_point_ordinal_out_of_range,
                binding_out_of_range_refused,
                binding_usage_refused,
                grid_1d_many,
                grid_2d,
                grid_3d,
                grid_3d_large,
                grid_tall,
                large_dispatch,
                per_entry_workgroup_size,
                pipeline_with_barriers,
                many_dispatches_one_command_buffer,
                independent_dispatches,
                pipeline_across_submissions,
                dispatch_device_local,
                dispatch_on_every_queue,
                other_device_executable_refused,
            }
            executable {
                catalogue_loads_with_abi,
                entry_point_by_name,
                entry_point_unknown_not_found,
                entry_point_ordinal_out_of_range,
                several_entry_points,
                executable_identity,
                command_buffer_keeps_executable,
                load_twice,
                shared_by_many_command_buffers,
                unloadable_sources_refused,
            }
            semaphore {
                query_after_create,
                signal_up,
                signal_same_value_refused,
                signal_down_refused,
                signal_to_max,
                fail_then_query,
                fail_then_wait,
                fail_then_signal,
                fail_twice_keeps_first,
                fail_keeps_any_status,
                fail_wakes_waiters,
                wait_reached,
                wait_immediate_timeout,
                wait_relative_timeout,
                wait_absolute_timeout,
                deadline_wait_on_inflight_work,
                wait_signalled_later,
                wait_signalled_beyond,
                wait_infinite_signalled,
                signal_wakes_only_reached,
                timeout_leaves_no_timepoints,
                wait_all_not_all_signalled,
                wait_all_signalled_later,
                wait_any,
                wait_all_with_failure,
                wait_any_with_failure,
                empty_lists,
                single_and_duplicate_entries,
                ping_pong_threads,
                many_threads_one_value,
                many_threads_many_values,
                simultaneous_multi_waits,
                concurrent_signals_monotonic,
                semaphores_independent,
                host_semaphore_contract,
                async_wait_reached,
                async_wait_signalled,
                async_wait_failure,
                async_wait_dropped,
                async_wait_many,
                wait_all_mixed_device_and_host,
                wait_any_mixed_device_and_host,
            }
            host_signal_only {
                queue_signals_refused,
                host_signal_releases_waiting_work,
                host_paced_chain,
                later_work_on_its_queue_is_not_held,
                chained_work_holds_no_queue,
                host_calls_and_other_devices_wait_for_it,
                failure_fails_waiting_work,
                device_dropped_while_work_waits,
            }
            submission {
                execute_empty_lists,
                signal_only,
                wait_before_signal_host,
                wait_before_signal_beyond,
                wait_already_reached,
                several_waits_and_signals,
                chain_across_queues,
                chain_across_queues_reversed,
                fan_out_fan_in,
                hundreds_in_flight,
                pending_cascade,
                submission_does_not_block,
                host_semaphores_in_lists,
                other_device_semaphore_wait,
                signal_not_ahead_refused,
                signal_failed_semaphore_refused,
                other_device_buffer_refused,
                hang_report_names_wait,
                same_queue_timeline,
                wait_on_later_submission,
                flush_every_queue,
                signal_after_work,
                wait_released_by_larger_signal_held,
                wait_covered_by_larger_signal_issued,
                queue_signal_and_wait_at_max,
                rapid_one_shot_cycles,
                signal_twice_in_one_list_refused,
                signal_behind_own_wait_refused,
            }
            queue_ops {
                fill_patterns,
                fill_refused,
                update,
                update_refused,
                copy,
                copy_refused,
                write,
                write_refused,
                read,
                read_refused,
                write_read_device_local,
                transfers_on_every_queue,
                alloca_dealloca_ordering,
                alloca_across_queues,
                alloca_used_by_dispatch,
                alloca_waits_and_refusals,
                alloca_many_cycles,
                barrier_joins,
                barrier_forks,
                host_call_in_order,
                host_call_wait_before_signal,
                host_call_error_fails_signals,
                host_call_signals_host_semaphore,
                alloca_reuse_across_queues,
                alloca_waits_for_dealloca_under_pressure,
                host_call_signals_later_from_thread,
                host_calls_held_by_one_gate_keep_their_order,
                host_call_waits_for_its_own_work_while_a_later_call_is_held,
                work_behind_a_host_call_waits_for_the_calls_it_submitted,
                work_whose_waits_include_a_waiting_host_calls_is_held_behind_it,
                work_submitted_after_a_host_calls_wait_is_reached_is_held_behind_it,
                work_that_signals_a_waiting_host_calls_wait_is_not_held_behind_it,
                work_a_host_call_submits_with_a_later_wait_is_not_held_behind_it,
                dealloca_of_a_non_transient_buffer_refused,
                dealloca_twice_refused,
                a_dealloca_whose_wait_failed_releases_nothing,
            }
            transfers {
                fill_size_classes,
                copy_size_classes,
                command_buffer_size_classes,
                staging_sized_transfers,
                copies_in_flight,
                zero_length_transfers,
                host_memory_transfers_never_block_the_submitter,
            }
            failure {
                failed_wait_fails_dependants,
                failed_before_submission,
                failure_propagates_down_chain,
                one_failed_wait_of_several,
                failure_reaches_host_waiters,
                failure_does_not_stop_other_work,
                failure_after_completion_is_harmless,
                failure_across_devices,
                failed_alloca_chain,
                fault_fails_exactly_its_signals,
                fault_fails_dependants,
                fault_fails_chained_dependants,
                device_works_after_fault,
                repeated_faults,
                fail_with_dependants_held,
                fail_with_dependants_issued,
            }
            resources {
                pools_listed,
                usage_reports_pending_work,
                idle_after_work,
                idle_after_failures,
                pools_reused,
                trim_gives_kept_memory_back,
                no_timepoints_left,
                dropped_handles_in_flight,
                many_semaphores,
                drop_device_with_pending_work,
                drop_device_with_work_in_flight,
                semaphore_outlives_device,
            }
            host_io {
                readback_waits_for_its_read,
                readback_is_awaitable,
                readback_is_awaitable_as_values,
                readback_of_a_failed_read_reports_its_cause,
                readback_agrees_with_its_signal_when_failures_race,
                readback_of_a_read_dropped_at_teardown_fails,
                a_panicking_readback_waker_does_not_stop_its_queue,
                readback_bytes_are_handed_over_once,
                typed_host_io_round_trips,
                labels_name_objects_in_errors_and_reports,
            }
            subspans {
                subspan_maps_relative_to_its_start,
                subspan_transfers_touch_only_their_range,
                subspan_as_dispatch_binding,
                subspan_keeps_its_parent_alive,
                overlapping_subspan_copies_refused,
                subspan_of_a_transient_buffer,
            }
            imported_memory {
                imported_memory_is_used_in_place,
                imported_memory_released_once_after_its_last_use,
                imported_memory_refusals_release_at_once,
                a_panicking_release_is_contained,
            }
            binding_tables {
                table_entries_reach_dispatches_and_transfers,
                overlapping_executes_with_different_tables,
                executes_issued_out_of_order_keep_their_tables,
                tables_of_every_memory_kind,
                tables_of_buffers_freed_and_reallocated,
                bad_tables_refused_at_the_call,
                fixed_buffers_and_slots_mix,
            }
            indirect_dispatch {
                count_read_from_a_buffer_at_each_execute,
                count_written_by_earlier_commands,
                count_written_by_later_submitted_queue_work,
                zero_and_oversized_counts,
                count_checked_and_taken_from_a_slot,
                long_chains_of_indirect_dispatches_complete,
            }
            kernel_abi {
                declared_layout_reaches_the_kernel,
                layouts_that_do_not_fit_refused_at_load,
                dynamic_workgroup_memory_reaches_the_kernel,
                too_much_workgroup_memory_refused_at_load,
            }
            spirv_modules {
                malformed_modules_refused_at_load,
                interface_wider_than_declared_refused_at_load,
                interface_taken_from_the_module_when_undeclared,
            }
            binding_offsets {
                zero_length_binding_reaches_no_byte_of_its_buffer,
                binding_offset_off_the_alignment_refused_at_the_call,
            }
            multi_device {
                wait_on_another_devices_signal_goes_to_the_device,
                wait_before_signal_across_devices,
                producer_on_another_device_retires_first,
                failure_crosses_devices_after_the_device_wait,
                ping_pong_between_devices,
                ring_of_four_devices,
                dropping_the_producing_device_never_hangs_the_waiter,
                copies_between_devices,
            }
            collective {
                all_reduce_every_op_and_type,
                gather_scatter_broadcast_and_all_to_all,
                send_and_receive_pairs,
                failure_on_one_rank_fails_every_rank,
                a_rank_that_drops_its_channel_fails_the_others_collectives,
                a_rank_whose_device_drops_fails_the_others_collectives,
                arguments_checked,
                command_buffer_all_reduce_executed_repeatedly,
                command_buffer_and_queue_collectives_share_one_order,
                command_buffer_collective_arguments_checked,
                command_buffer_collective_abandoned_fails_every_rank,
            }
            profiling {
                queue_operations_recorded_in_stream_order,
                dispatches_recorded_with_command_indices,
                indirect_and_directly_replayed_dispatches,
                command_filter_and_binding_table_executes,
                sessions_misuse_and_unrun_work,
            }
            zero_sizes {
                zero_byte_buffers_allocate_map_read_and_bind,
                zero_byte_alloca_and_dealloca,
                zero_workgroup_dispatch_signals,
                zero_workgroup_dispatch_held_then_released,
                zero_workgroup_dispatch_among_other_commands,
            }
            misuse {
                last_handles_dropped_with_cross_queue_work_in_flight_never_deadlock,
                host_call_waits_on_its_own_queue,
                timed_wait_returns_by_its_deadline_while_a_host_call_runs,
                held_execute_is_cancelled_when_the_device_drops,
                a_panicking_waker_does_not_stop_delivery,
                later_work_on_the_queue_starts_after_the_host_call_returns,
                non_blocking_host_call_lets_later_work_run,
                failing_a_semaphore_fails_issued_work_that_waits_on_it,
                a_single_wait_wakes_when_the_host_reaches_the_value,
            }
            interop {
                unaccepted_external_memory_is_unimplemented_and_released_at_once,
                unaccepted_external_timepoints_are_unimplemented_and_signal_nothing,
                empty_external_memory_of_every_kind_is_refused_before_the_driver,
                a_foreign_threads_signal_releases_queue_work,
                a_foreign_signal_that_never_comes_times_out_then_the_drop_cancels,
            }
        }
    };
}

/// Expands the case list into the case table (`[table]`) or into one `#[test]` per case
/// (`[tests <module> <fixture closure>]`).
#[doc(hidden)]
#[macro_export]
macro_rules! __cts_expand {
    ([table] $($area:ident { $($case:ident),* $(,)? })*) => {
        /// Every case of the suite, in area order.
        pub static CASES: &[$crate::Case] = &[
            $($($crate::Case { area: stringify!($area), name: stringify!($case), run: $crate::$area::$case },)*)*
        ];
    };
    ([tests $module:ident $fixture:expr, #[$attr:meta]] $($area:ident { $($case:ident),* $(,)? })*) => {
        #[allow(unused_imports)]
        mod $module {
            use super::*;

            fn fixture() -> $crate::Fixture {
                let make = $fixture;
                make()
            }

            /// The libtest name of a generated test (its module path without the crate).
            fn test_name(path: &str, case: &str) -> String {
                let path = path.split_once("::").map_or(path, |(_, rest)| rest);
                format!("{path}::{case}")
            }

            $(
                mod $area {
                    $(
                        #[test]
                        #[$attr]
                        fn $case() {
                            let name = super::test_name(module_path!(), stringify!($case));
                            $crate::run_test(super::fixture, &name, stringify!($area), stringify!($case));
                        }
                    )*
                }
            )*
        }
    };
}

__cts_case_list!(table);

/// Generates the whole suite as ordinary tests, one `#[test]` per case, in a module `$module`:
/// `cargo test` names a failing case `$module::<area>::<case>`. `$fixture` is a closure (or fn)
/// returning the driver's [`Fixture`]; it is called once per test. Invoke it once, in a test file of
/// the driver's crate (with ctest as a dev-dependency):
///
/// ```no_run
/// ctest::instantiate_cts!(cpu_sim, driver_cpu_sim::cts::fixture);
/// ```
///
/// Run one area with `cargo test --test <file> <module>::semaphore::`. Each test runs its case in a
/// child process (the same test binary) so a crash fails only that test; `CTEST_ISOLATE=0` runs
/// them in-process.
///
/// An attribute after the fixture goes on every generated test, e.g. to mark them ignored, with the
/// reason, where they cannot run (driver-cuda's `tests/cts.rs` does so where no CUDA driver was found
/// at build time):
///
/// ```no_run
/// ctest::instantiate_cts!(cpu_sim, driver_cpu_sim::cts::fixture, #[cfg_attr(miri, ignore = "too slow under Miri")]);
/// ```
#[macro_export]
macro_rules! instantiate_cts {
    ($module:ident, $fixture:expr $(,)?) => {
        // An attribute that never applies: the generated tests are plain `#[test]`s.
        $crate::__cts_case_list!(tests $module $fixture, #[cfg_attr(any(), ignore)]);
    };
    ($module:ident, $fixture:expr, #[$attr:meta] $(,)?) => {
        $crate::__cts_case_list!(tests $module $fixture, #[$attr]);
    };
}
