//===- Reference.h - what a fuzz program computes, on the CPU ---*- C++ -*-===//
#ifndef TESSEL_FUZZ_REFERENCE_H
#define TESSEL_FUZZ_REFERENCE_H

#include "Spec.h"

#include <cstdint>
#include <vector>

namespace tessel::fuzz {

/// Element `e` of `bytes`, a tensor of type `t`, as the value it holds (f32,
/// bf16, f16, FP8 or i8).
float valueAt(const std::vector<uint8_t> &bytes, DType t, size_t e);

/// The bytes of every output tensor of `s` (in tensors() order, outputs
/// only) for these input tensors' bytes, computed on the CPU from the DSL's
/// documented semantics; unwritten elements hold the 0xff poison.
std::vector<std::vector<uint8_t>> referenceOutputs(const Spec &s,
                                                   const std::vector<std::vector<uint8_t>> &inputs);

} // namespace tessel::fuzz

#endif
