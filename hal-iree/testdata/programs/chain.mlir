// 8 dependent elementwise steps on a 1024-element vector: x = x * 1.5 + 1.0, eight times.
// Each step is its own linalg.generic; see ../README.md for how many dispatches IREE makes of them.
#id = affine_map<(d0) -> (d0)>
func.func @chain(%arg0: tensor<1024xf32>) -> tensor<1024xf32> {
  %init = tensor.empty() : tensor<1024xf32>
  %mul = arith.constant 1.5 : f32
  %add = arith.constant 1.0 : f32
  %x0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%arg0 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %x1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x0 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %x2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x1 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %x3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x2 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %x4 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x3 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %x5 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x4 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %x6 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x5 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %x7 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x6 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  return %x7 : tensor<1024xf32>
}
