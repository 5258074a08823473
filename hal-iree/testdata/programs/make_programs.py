"""Writes the MLIR of hal-iree's programs of real size, each at two sizes: the full one the GPU
tables use (`<name>.mlir`) and a small one CI runs on cpu-sim and lavapipe (`<name>_small.mlir`).

    python3 make_programs.py DIR

- mlp4: a 4-layer MLP, batch 64, 4096 wide (small: batch 4, 64 wide), ReLU between layers.
- transformer / transformer_f16: one transformer block, attention with sequence 512, model width
  1024, 16 heads, then an MLP of width 4096, residuals around both (small: 32, 64, 4 heads, 128).
  The f16 block takes and returns f32 and computes in f16.
- conv: two 3x3 convolutions (NHWC, no padding) with bias and ReLU, 8x64x64x32 -> 8x60x60x64
  (small: 1x16x16x4 -> 1x12x12x8).
Weights are function arguments: the runner generates them (`--input=random:...`).
"""

import sys
from pathlib import Path

ID2 = "affine_map<(d0, d1) -> (d0, d1)>"
ROW2 = "affine_map<(d0, d1) -> (d1)>"
ID3 = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"


def matmul(out, a, b, m, k, n, t):
    return f"""    %{out}_e = tensor.empty() : tensor<{m}x{n}x{t}>
    %{out}_z = linalg.fill ins(%zero : {t}) outs(%{out}_e : tensor<{m}x{n}x{t}>) -> tensor<{m}x{n}x{t}>
    %{out} = linalg.matmul ins(%{a}, %{b} : tensor<{m}x{k}x{t}>, tensor<{k}x{n}x{t}>) outs(%{out}_z : tensor<{m}x{n}x{t}>) -> tensor<{m}x{n}x{t}>
"""


def elementwise2(out, a, b, m, n, t, body, b_map=ID2):
    """out = body(a, b) elementwise over mxn; body uses %bx, %by and yields %br."""
    return f"""    %{out}_e = tensor.empty() : tensor<{m}x{n}x{t}>
    %{out} = linalg.generic {{indexing_maps = [{ID2}, {b_map}, {ID2}], iterator_types = ["parallel", "parallel"]}}
        ins(%{a}, %{b} : tensor<{m}x{n}x{t}>, tensor<{'' if b_map == ROW2 else f'{m}x'}{n}x{t}>) outs(%{out}_e : tensor<{m}x{n}x{t}>) {{
    ^bb0(%bx: {t}, %by: {t}, %bo: {t}):
{body}      linalg.yield %br : {t}
    }} -> tensor<{m}x{n}x{t}>
"""


def mlp4(batch, width, layers=4):
    t = "f32"
    args = [f"%x: tensor<{batch}x{width}xf32>"]
    for i in range(layers):
        args += [f"%w{i}: tensor<{width}x{width}xf32>", f"%b{i}: tensor<{width}xf32>"]
    body = f"    %zero = arith.constant 0.0 : {t}\n"
    h = "x"
    for i in range(layers):
        body += matmul(f"m{i}", h, f"w{i}", batch, width, width, t)
        relu = i + 1 < layers
        op = "      %bs = arith.addf %bx, %by : f32\n" + (
            "      %br = arith.maximumf %bs, %zero : f32\n" if relu else "      %br = arith.addf %bs, %zero : f32\n"
        )
        body += elementwise2(f"h{i}", f"m{i}", f"b{i}", batch, width, t, op, ROW2)
        h = f"h{i}"
    return f"""func.func @mlp4({", ".join(args)}) -> tensor<{batch}x{width}xf32> {{
{body}    return %{h} : tensor<{batch}x{width}xf32>
}}
"""


def transformer(seq, width, heads, hidden, t):
    dh = width // heads
    scale = 1.0 / dh**0.5
    f32_args = [f"%x32: tensor<{seq}x{width}xf32>"] + [f"%{w}32: tensor<{width}x{width}xf32>" for w in ("wq", "wk", "wv", "wo")]
    f32_args += [f"%w132: tensor<{width}x{hidden}xf32>", f"%w232: tensor<{hidden}x{width}xf32>"]
    # Softmax runs in f32 in both variants (mixed precision, as f16 models do).
    body = f"    %zero = arith.constant 0.0 : {t}\n    %scale = arith.constant {scale:.8e} : f32\n"
    # In the f32 variant the conversions are identities (+0.0).
    widen = "arith.addf %ba, %zero : f32" if t == "f32" else f"arith.extf %ba : {t} to f32"
    narrow = "arith.addf %ba, %zero : f32" if t == "f32" else f"arith.truncf %ba : f32 to {t}"
    shapes = {"x": (seq, width), "wq": (width, width), "wk": (width, width), "wv": (width, width), "wo": (width, width),
              "w1": (width, hidden), "w2": (hidden, width)}
    for name, (r, c) in shapes.items():
        if t == "f32":
            body += f"    %{name} = tensor.cast %{name}32 : tensor<{r}x{c}xf32> to tensor<{r}x{c}xf32>\n"
        else:
            body += f"""    %{name}_e = tensor.empty() : tensor<{r}x{c}x{t}>
    %{name} = linalg.generic {{indexing_maps = [{ID2}, {ID2}], iterator_types = ["parallel", "parallel"]}}
        ins(%{name}32 : tensor<{r}x{c}xf32>) outs(%{name}_e : tensor<{r}x{c}x{t}>) {{
    ^bb0(%ba: f32, %bo: {t}):
      %br = arith.truncf %ba : f32 to {t}
      linalg.yield %br : {t}
    }} -> tensor<{r}x{c}x{t}>
"""
    for p in ("q", "k", "v"):
        body += matmul(p, "x", f"w{p}", seq, width, width, t)
        body += f"    %{p}3 = tensor.expand_shape %{p} [[0], [1, 2]] output_shape [{seq}, {heads}, {dh}] : tensor<{seq}x{width}x{t}> into tensor<{seq}x{heads}x{dh}x{t}>\n"
    body += f"""    %qt_e = tensor.empty() : tensor<{heads}x{seq}x{dh}x{t}>
    %qt = linalg.transpose ins(%q3 : tensor<{seq}x{heads}x{dh}x{t}>) outs(%qt_e : tensor<{heads}x{seq}x{dh}x{t}>) permutation = [1, 0, 2]
    %kt_e = tensor.empty() : tensor<{heads}x{dh}x{seq}x{t}>
    %kt = linalg.transpose ins(%k3 : tensor<{seq}x{heads}x{dh}x{t}>) outs(%kt_e : tensor<{heads}x{dh}x{seq}x{t}>) permutation = [1, 2, 0]
    %vt_e = tensor.empty() : tensor<{heads}x{seq}x{dh}x{t}>
    %vt = linalg.transpose ins(%v3 : tensor<{seq}x{heads}x{dh}x{t}>) outs(%vt_e : tensor<{heads}x{seq}x{dh}x{t}>) permutation = [1, 0, 2]
    %s_e = tensor.empty() : tensor<{heads}x{seq}x{seq}x{t}>
    %s_z = linalg.fill ins(%zero : {t}) outs(%s_e : tensor<{heads}x{seq}x{seq}x{t}>) -> tensor<{heads}x{seq}x{seq}x{t}>
    %s = linalg.batch_matmul ins(%qt, %kt : tensor<{heads}x{seq}x{dh}x{t}>, tensor<{heads}x{dh}x{seq}x{t}>) outs(%s_z : tensor<{heads}x{seq}x{seq}x{t}>) -> tensor<{heads}x{seq}x{seq}x{t}>
    %ss_e = tensor.empty() : tensor<{heads}x{seq}x{seq}xf32>
    %ss = linalg.generic {{indexing_maps = [{ID3}, {ID3}], iterator_types = ["parallel", "parallel", "parallel"]}}
        ins(%s : tensor<{heads}x{seq}x{seq}x{t}>) outs(%ss_e : tensor<{heads}x{seq}x{seq}xf32>) {{
    ^bb0(%ba: {t}, %bo: f32):
      %bw = {widen}
      %br = arith.mulf %bw, %scale : f32
      linalg.yield %br : f32
    }} -> tensor<{heads}x{seq}x{seq}xf32>
    %p32_e = tensor.empty() : tensor<{heads}x{seq}x{seq}xf32>
    %p32 = linalg.softmax dimension(2) ins(%ss : tensor<{heads}x{seq}x{seq}xf32>) outs(%p32_e : tensor<{heads}x{seq}x{seq}xf32>) -> tensor<{heads}x{seq}x{seq}xf32>
    %p_e = tensor.empty() : tensor<{heads}x{seq}x{seq}x{t}>
    %p = linalg.generic {{indexing_maps = [{ID3}, {ID3}], iterator_types = ["parallel", "parallel", "parallel"]}}
        ins(%p32 : tensor<{heads}x{seq}x{seq}xf32>) outs(%p_e : tensor<{heads}x{seq}x{seq}x{t}>) {{
    ^bb0(%ba: f32, %bo: {t}):
      %br = {narrow}
      linalg.yield %br : {t}
    }} -> tensor<{heads}x{seq}x{seq}x{t}>
    %c_e = tensor.empty() : tensor<{heads}x{seq}x{dh}x{t}>
    %c_z = linalg.fill ins(%zero : {t}) outs(%c_e : tensor<{heads}x{seq}x{dh}x{t}>) -> tensor<{heads}x{seq}x{dh}x{t}>
    %c = linalg.batch_matmul ins(%p, %vt : tensor<{heads}x{seq}x{seq}x{t}>, tensor<{heads}x{seq}x{dh}x{t}>) outs(%c_z : tensor<{heads}x{seq}x{dh}x{t}>) -> tensor<{heads}x{seq}x{dh}x{t}>
    %ct_e = tensor.empty() : tensor<{seq}x{heads}x{dh}x{t}>
    %ct = linalg.transpose ins(%c : tensor<{heads}x{seq}x{dh}x{t}>) outs(%ct_e : tensor<{seq}x{heads}x{dh}x{t}>) permutation = [1, 0, 2]
    %c2 = tensor.collapse_shape %ct [[0], [1, 2]] : tensor<{seq}x{heads}x{dh}x{t}> into tensor<{seq}x{width}x{t}>
"""
    body += matmul("a", "c2", "wo", seq, width, width, t)
    body += elementwise2("h", "x", "a", seq, width, t, f"      %br = arith.addf %bx, %by : {t}\n")
    body += matmul("u", "h", "w1", seq, width, hidden, t)
    body += f"""    %g_e = tensor.empty() : tensor<{seq}x{hidden}x{t}>
    %g = linalg.generic {{indexing_maps = [{ID2}, {ID2}], iterator_types = ["parallel", "parallel"]}}
        ins(%u : tensor<{seq}x{hidden}x{t}>) outs(%g_e : tensor<{seq}x{hidden}x{t}>) {{
    ^bb0(%ba: {t}, %bo: {t}):
      %br = arith.maximumf %ba, %zero : {t}
      linalg.yield %br : {t}
    }} -> tensor<{seq}x{hidden}x{t}>
"""
    body += matmul("d", "g", "w2", seq, hidden, width, t)
    body += elementwise2("y", "h", "d", seq, width, t, f"      %br = arith.addf %bx, %by : {t}\n")
    body += f"""    %out_e = tensor.empty() : tensor<{seq}x{width}xf32>
    %out = linalg.generic {{indexing_maps = [{ID2}, {ID2}], iterator_types = ["parallel", "parallel"]}}
        ins(%y : tensor<{seq}x{width}x{t}>) outs(%out_e : tensor<{seq}x{width}xf32>) {{
    ^bb0(%ba: {t}, %bo: f32):
      %br = {widen}
      linalg.yield %br : f32
    }} -> tensor<{seq}x{width}xf32>
"""
    name = "transformer" if t == "f32" else "transformer_f16"
    return f"""func.func @{name}({", ".join(f32_args)}) -> tensor<{seq}x{width}xf32> {{
{body}    return %out : tensor<{seq}x{width}xf32>
}}
"""


def conv(n, hw, cin, cmid, cout):
    t = "f32"
    h1, h2 = hw - 2, hw - 4
    m4 = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
    b4 = "affine_map<(d0, d1, d2, d3) -> (d3)>"

    def layer(out, inp, hin, ci, co, w, b):
        ho = hin - 2
        return f"""    %{out}_e = tensor.empty() : tensor<{n}x{ho}x{ho}x{co}xf32>
    %{out}_z = linalg.fill ins(%zero : f32) outs(%{out}_e : tensor<{n}x{ho}x{ho}x{co}xf32>) -> tensor<{n}x{ho}x{ho}x{co}xf32>
    %{out}_c = linalg.conv_2d_nhwc_hwcf {{dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}}
        ins(%{inp}, %{w} : tensor<{n}x{hin}x{hin}x{ci}xf32>, tensor<3x3x{ci}x{co}xf32>) outs(%{out}_z : tensor<{n}x{ho}x{ho}x{co}xf32>) -> tensor<{n}x{ho}x{ho}x{co}xf32>
    %{out} = linalg.generic {{indexing_maps = [{m4}, {b4}, {m4}], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
        ins(%{out}_c, %{b} : tensor<{n}x{ho}x{ho}x{co}xf32>, tensor<{co}xf32>) outs(%{out}_e : tensor<{n}x{ho}x{ho}x{co}xf32>) {{
    ^bb0(%bx: f32, %by: f32, %bo: f32):
      %bs = arith.addf %bx, %by : f32
      %br = arith.maximumf %bs, %zero : f32
      linalg.yield %br : f32
    }} -> tensor<{n}x{ho}x{ho}x{co}xf32>
"""

    body = f"    %zero = arith.constant 0.0 : {t}\n"
    body += layer("a", "x", hw, cin, cmid, "w0", "b0")
    body += layer("y", "a", h1, cmid, cout, "w1", "b1")
    args = [f"%x: tensor<{n}x{hw}x{hw}x{cin}xf32>", f"%w0: tensor<3x3x{cin}x{cmid}xf32>", f"%b0: tensor<{cmid}xf32>",
            f"%w1: tensor<3x3x{cmid}x{cout}xf32>", f"%b1: tensor<{cout}xf32>"]
    return f"""func.func @conv({", ".join(args)}) -> tensor<{n}x{h2}x{h2}x{cout}xf32> {{
{body}    return %y : tensor<{n}x{h2}x{h2}x{cout}xf32>
}}
"""


PROGRAMS = {
    "mlp4": (lambda: mlp4(64, 4096), lambda: mlp4(4, 64)),
    "transformer": (lambda: transformer(512, 1024, 16, 4096, "f32"), lambda: transformer(32, 64, 4, 128, "f32")),
    "transformer_f16": (lambda: transformer(512, 1024, 16, 4096, "f16"), lambda: transformer(32, 64, 4, 128, "f16")),
    "conv": (lambda: conv(8, 64, 32, 64, 64), lambda: conv(1, 16, 4, 8, 8)),
}

HEADER = "// Generated by make_programs.py ({}); edit that, not this.\n"

if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    for name, (full, small) in PROGRAMS.items():
        (out / f"{name}.mlir").write_text(HEADER.format("full size") + full())
        (out / f"{name}_small.mlir").write_text(HEADER.format("small, for CI") + small())
        print(name)
