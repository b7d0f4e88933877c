//===- TileNVEnums.td - enums of the tilenv dialect --------*- tablegen -*-===//
#ifndef TESSEL_TILENV_ENUMS
#define TESSEL_TILENV_ENUMS

include "mlir/IR/EnumAttr.td"

def TileNV_TmemShape : I32EnumAttr<"TmemShape", "tcgen05.ld/st data-movement shape", [
    I32EnumAttrCase<"s32x32b", 0>, I32EnumAttrCase<"s16x64b", 1>,
    I32EnumAttrCase<"s16x128b", 2>, I32EnumAttrCase<"s16x256b", 3>,
    I32EnumAttrCase<"s16x32bx2", 4>]> {
  let cppNamespace = "::tessel::tilenv";
}

def TileNV_TmemCopyShape : I32EnumAttr<"TmemCopyShape", "tcgen05.cp shape", [
    I32EnumAttrCase<"s128x256b", 0>, I32EnumAttrCase<"s4x256b", 1>,
    I32EnumAttrCase<"s128x128b", 2>, I32EnumAttrCase<"s32x128b_warpx4", 3>]> {
  let cppNamespace = "::tessel::tilenv";
}

def TileNV_Tcgen05Kind : I32EnumAttr<"Tcgen05Kind", "tcgen05.mma kind", [
    I32EnumAttrCase<"f16", 0>, I32EnumAttrCase<"f8f6f4", 1>, I32EnumAttrCase<"i8", 2>,
    I32EnumAttrCase<"mxf8f6f4", 3>]> {
  let cppNamespace = "::tessel::tilenv";
}

#endif
