// The C suite's kernel for Vulkan, compiled to SPIR-V by c_suite.rs: fill_index as kernels.c has it,
// in IREE's Vulkan ABI (binding i at group 0 binding i, the constants one push-constant block).
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
struct Constants { base: u32, n: u32 }
var<immediate> c: Constants;

// fill_index(out; base, n): out[i] = base + i for i below n.
@compute @workgroup_size(64)
fn fill_index(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < c.n) {
        out[id.x] = c.base + id.x;
    }
}
