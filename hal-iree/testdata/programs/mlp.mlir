// Two-layer perceptron: y = relu(x * w1 + b1) * w2 + b2.
#bias = affine_map<(d0, d1) -> (d1)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @mlp(%x: tensor<4x64xf32>, %w1: tensor<64x128xf32>, %b1: tensor<128xf32>,
               %w2: tensor<128x10xf32>, %b2: tensor<10xf32>) -> tensor<4x10xf32> {
  %zero = arith.constant 0.0 : f32
  // Layer 1: matmul, bias, relu.
  %e1 = tensor.empty() : tensor<4x128xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x128xf32>) -> tensor<4x128xf32>
  %m1 = linalg.matmul ins(%x, %w1 : tensor<4x64xf32>, tensor<64x128xf32>)
                      outs(%f1 : tensor<4x128xf32>) -> tensor<4x128xf32>
  %h = linalg.generic {indexing_maps = [#id2, #bias, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%m1, %b1 : tensor<4x128xf32>, tensor<128xf32>) outs(%e1 : tensor<4x128xf32>) {
  ^bb0(%v: f32, %b: f32, %out: f32):
    %s = arith.addf %v, %b : f32
    %r = arith.maximumf %s, %zero : f32
    linalg.yield %r : f32
  } -> tensor<4x128xf32>
  // Layer 2: matmul, bias.
  %e2 = tensor.empty() : tensor<4x10xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x10xf32>) -> tensor<4x10xf32>
  %m2 = linalg.matmul ins(%h, %w2 : tensor<4x128xf32>, tensor<128x10xf32>)
                      outs(%f2 : tensor<4x10xf32>) -> tensor<4x10xf32>
  %y = linalg.generic {indexing_maps = [#id2, #bias, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%m2, %b2 : tensor<4x10xf32>, tensor<10xf32>) outs(%e2 : tensor<4x10xf32>) {
  ^bb0(%v: f32, %b: f32, %out: f32):
    %s = arith.addf %v, %b : f32
    linalg.yield %s : f32
  } -> tensor<4x10xf32>
  return %y : tensor<4x10xf32>
}
