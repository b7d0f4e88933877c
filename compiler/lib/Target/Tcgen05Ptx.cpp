//===- Tcgen05Ptx.cpp - the PTX text of tcgen05 instructions --------------===//
#include "Tcgen05Ptx.h"

using namespace tessel;

static std::string registerList(int first, int count) {
  std::string list = "{";
  for (int i = 0; i < count; ++i) list += (i ? ", %" : "%") + std::to_string(first + i);
  return list + "}";
}

static std::string moveOpcode(const char *op, layout::TmemShape shape, int num, const char *mode) {
  return std::string("tcgen05.") + op + ".sync.aligned." + layout::name(shape) + ".x" +
         std::to_string(num) + mode + ".b32";
}

std::string target::tcgen05LoadPtx(layout::TmemShape shape, int num, bool pack,
                                   std::optional<int64_t> offset, int registers) {
  std::string text = moveOpcode("ld", shape, num, pack ? ".pack::16b" : "") + " " +
                     registerList(0, registers) + ", [%" + std::to_string(registers) + "]";
  if (offset) text += ", " + std::to_string(*offset);
  return text + ";";
}

std::string target::tcgen05StorePtx(layout::TmemShape shape, int num, bool unpack,
                                    std::optional<int64_t> offset, int registers) {
  std::string text = moveOpcode("st", shape, num, unpack ? ".unpack::16b" : "") + " [%0]";
  if (offset) text += ", " + std::to_string(*offset);
  return text + ", " + registerList(1, registers) + ";";
}

std::string target::tcgen05MmaPtx(bool aInTmem, const std::string &kind) {
  // enable-input-d is a predicate.
  return "{\\n.reg .pred p;\\nsetp.ne.b32 p, %4, 0;\\ntcgen05.mma.cta_group::1.kind::" + kind +
         " [%0], " +
         (aInTmem ? "[%1]" : "%1") + ", %2, %3, p;\\n}";
}

std::string target::tcgen05BlockScaledMmaPtx(bool aInTmem) {
  return std::string("{\\n.reg .pred p;\\nsetp.ne.b32 p, %4, 0;\\n"
                     "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X [%0], ") +
         (aInTmem ? "[%1]" : "%1") + ", %2, %3, [%5], [%6], p;\\n}";
}

std::string target::tcgen05CopyPtx(const std::string &shape) {
  return "tcgen05.cp.cta_group::1." + shape + " [%0], %1;";
}

std::string target::tcgen05AllocPtx() {
  return "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;";
}

std::string target::tcgen05DeallocPtx() {
  return "tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;";
}

std::string target::tcgen05CommitPtx() {
  return "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];";
}
