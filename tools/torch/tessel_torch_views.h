//===- tessel_torch_views.h - PyTorch tensors as Tessel views ----*- C++ -*-===//
//
// What the tessel_torch operators share: a tensor's view through DLPack,
// Tessel's errors as Python exceptions, and PyTorch's current stream.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TORCH_VIEWS_H
#define TESSEL_TORCH_VIEWS_H

#include <ATen/DLConvertor.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <tessel/Tessel.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace torch_views {

/// A view of `t` through DLPack; the managed tensor is released at once
/// (the view borrows `t`, which the caller keeps alive).
inline tessel::TensorView viewOf(const at::Tensor &t, const char *what) {
  // A std exception, not TORCH_CHECK's c10::Error: thrown out of this
  // extension, that one crashed the process (measured with torch 2.11),
  // where std::invalid_argument reaches Python as a ValueError.
  if (!t.is_cuda()) throw std::invalid_argument(std::string(what) + " must be a CUDA tensor");
  DLManagedTensor *managed = at::toDLPack(t);
  std::unique_ptr<DLManagedTensor, void (*)(DLManagedTensor *)> owner(
      managed, [](DLManagedTensor *m) { m->deleter(m); });
  try {
    return tessel::rt::fromDLPack(*managed);
  } catch (const tessel::Error &e) {
    throw std::invalid_argument(std::string(what) + ": " + e.what());
  }
}

/// `fn()`, with Tessel's errors as std::runtime_error (PyTorch raises a
/// RuntimeError with the message).
template <class Fn> auto translated(Fn &&fn) {
  try {
    return fn();
  } catch (const tessel::Error &e) {
    throw std::runtime_error(std::string("tessel: ") + e.what());
  }
}

inline CUstream currentStream(const at::Tensor &t) {
  return reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(t.get_device()).stream());
}

} // namespace torch_views

#endif
