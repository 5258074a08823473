func.func @step(%x: tensor<256xf32>) -> tensor<256xf32> {
  %one = arith.constant dense<1.0> : tensor<256xf32>
  %y = arith.addf %x, %one : tensor<256xf32>
  return %y : tensor<256xf32>
}
