// The same 8 steps as chain.mlir, but each result passes through util.optimization_barrier (IREE's util
// dialect), which stops IREE fusing the steps: the compiled module runs 8 dependent dispatches.
// Same function name and the same expected output as chain.mlir.
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
  %b0 = util.optimization_barrier %x0 : tensor<1024xf32>
  %x1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b0 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %b1 = util.optimization_barrier %x1 : tensor<1024xf32>
  %x2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b1 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %b2 = util.optimization_barrier %x2 : tensor<1024xf32>
  %x3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b2 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %b3 = util.optimization_barrier %x3 : tensor<1024xf32>
  %x4 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b3 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %b4 = util.optimization_barrier %x4 : tensor<1024xf32>
  %x5 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b4 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %b5 = util.optimization_barrier %x5 : tensor<1024xf32>
  %x6 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b5 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %b6 = util.optimization_barrier %x6 : tensor<1024xf32>
  %x7 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b6 : tensor<1024xf32>) outs(%init : tensor<1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %mul : f32
    %a = arith.addf %m, %add : f32
    linalg.yield %a : f32
  } -> tensor<1024xf32>
  %b7 = util.optimization_barrier %x7 : tensor<1024xf32>
  return %b7 : tensor<1024xf32>
}
