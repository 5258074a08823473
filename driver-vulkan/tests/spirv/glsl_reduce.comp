#version 450
// A workgroup sum of 256 words through shared memory; one binding, no constants.
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) buffer Data { uint words[]; } data;
shared uint partial[256];
void main() {
  uint l = gl_LocalInvocationID.x;
  partial[l] = data.words[gl_GlobalInvocationID.x];
  barrier();
  for (uint s = 128; s > 0; s >>= 1) {
    if (l < s) partial[l] += partial[l + s];
    barrier();
  }
  if (l == 0) data.words[gl_WorkGroupID.x * 256] = partial[0];
}
