//===- TileNVOps.td - NVIDIA thread-level intrinsics -------*- tablegen -*-===//
//
// The thread-level IR after tessel-lower-tile-ops is per-thread scf, arith,
// math and memref code plus these NVIDIA intrinsics; the CUDA emitter prints
// each as one CUDA statement or device-header call.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TILENV_OPS
#define TESSEL_TILENV_OPS

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "tessel/Dialect/Tile/TileDialect.td"

def TileNV_Dialect : Dialect {
  let name = "tilenv";
  let cppNamespace = "::tessel::tilenv";
  let summary = "NVIDIA thread-level intrinsics";
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

class TileNV_Op<string mnemonic, list<Trait> traits = []>
    : Op<TileNV_Dialect, mnemonic, traits>;

def TileNV_ThreadIdOp : TileNV_Op<"thread_id", [Pure]> {
  let summary = "threadIdx.x";
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

def TileNV_SyncThreadsOp : TileNV_Op<"sync_threads"> {
  let summary = "__syncthreads()";
  let assemblyFormat = "attr-dict";
}

def TileNV_ShflXorOp : TileNV_Op<"shfl_xor", [AllTypesMatch<["value", "result"]>]> {
  let summary = "butterfly shuffle within groups of `width` lanes (whole warp converged)";
  let arguments = (ins AnyTypeOf<[F32, I32]>:$value, I32Attr:$offset, I32Attr:$width);
  let results = (outs AnyTypeOf<[F32, I32]>:$result);
  let assemblyFormat = "$value `,` $offset `,` $width attr-dict `:` type($value)";
}

def TileNV_AtomicAddOp : TileNV_Op<"atomic_add"> {
  let summary = "atomic add to one element of global or shared memory";
  let arguments = (ins AnyType:$value, AnyMemRef:$memref, Variadic<Index>:$indices,
                       Tile_MemoryOrder:$order);
  let assemblyFormat = [{
    $value `,` $memref `[` $indices `]` $order attr-dict `:` type($value) `,` type($memref)
  }];
}

def TileNV_CopyVectorOp : TileNV_Op<"copy_vector", [AttrSizedOperandSegments]> {
  let summary = "move `bytes` contiguous bytes (4, 8 or 16, aligned) between buffers";
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$source_indices,
                       AnyMemRef:$dest, Variadic<Index>:$dest_indices, I64Attr:$bytes);
  let assemblyFormat = [{
    $source `[` $source_indices `]` `,` $dest `[` $dest_indices `]` `bytes` `=` $bytes
    attr-dict `:` type($source) `,` type($dest)
  }];
}

#endif
