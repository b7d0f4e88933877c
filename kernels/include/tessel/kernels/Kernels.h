//===- Kernels.h - Tessel's kernel library ----------------------*- C++ -*-===//
//
// Each kernel is a function from a configuration to a Program. Tensor extents
// that vary at run time are symbols; tile sizes, thread counts and types are
// compile-time configuration. One header per room of kernels/: basic
// (element-wise and row-wise), gemm, attention; the multi-GPU exchanges are
// in tessel/kernels/parallel/.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_KERNELS_H
#define TESSEL_KERNELS_KERNELS_H

#include "tessel/kernels/attention/Attention.h"
#include "tessel/kernels/basic/Basic.h"
#include "tessel/kernels/decode/Decode.h"
#include "tessel/kernels/gemm/Gemm.h"
#include "tessel/kernels/gemm/WeightGemm.h"

#endif
