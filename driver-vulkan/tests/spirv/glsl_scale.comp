#version 450
// out[i] = in[i] * scale + bias over `count` words: bindings 0 and 1, three push-constant words.
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer In { float values[]; } src;
layout(set = 0, binding = 1) buffer Out { float values[]; } dst;
layout(push_constant) uniform Constants { uint count; float scale; float bias; } pc;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < pc.count) dst.values[i] = src.values[i] * pc.scale + pc.bias;
}
