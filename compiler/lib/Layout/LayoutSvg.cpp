//===- LayoutSvg.cpp - pictures of layouts --------------------------------===//
#include "tessel/Layout/LayoutSvg.h"

#include <map>
#include <sstream>

using namespace tessel::layout;

namespace {
constexpr int kCellW = 34, kCellH = 22, kMargin = 40;

struct Canvas {
  std::ostringstream out;
  Canvas(int64_t rows, int64_t cols, const std::string &title) {
    out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << cols * kCellW + 2 * kMargin
        << "\" height=\"" << rows * kCellH + 2 * kMargin << "\" font-family=\"monospace\">\n"
        << "<text x=\"" << kMargin << "\" y=\"" << kMargin / 2 << "\" font-size=\"13\">" << title
        << "</text>\n";
    for (int64_t c = 0; c < cols; ++c)
      out << "<text x=\"" << kMargin + c * kCellW + kCellW / 2 << "\" y=\"" << kMargin - 4
          << "\" font-size=\"8\" text-anchor=\"middle\">" << c << "</text>\n";
    for (int64_t r = 0; r < rows; ++r)
      out << "<text x=\"" << kMargin - 4 << "\" y=\"" << kMargin + r * kCellH + kCellH / 2 + 3
          << "\" font-size=\"8\" text-anchor=\"end\">" << r << "</text>\n";
  }
  void cell(int64_t r, int64_t c, int hue, int light, const std::string &top,
            const std::string &bottom) {
    int x = kMargin + c * kCellW, y = kMargin + r * kCellH;
    out << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << kCellW << "\" height=\""
        << kCellH << "\" fill=\"hsl(" << hue << ",70%," << light
        << "%)\" stroke=\"white\" stroke-width=\"0.5\"/>\n"
        << "<text x=\"" << x + kCellW / 2 << "\" y=\"" << y + 9
        << "\" font-size=\"8\" text-anchor=\"middle\">" << top << "</text>\n";
    if (!bottom.empty())
      out << "<text x=\"" << x + kCellW / 2 << "\" y=\"" << y + 18
          << "\" font-size=\"7\" text-anchor=\"middle\">" << bottom << "</text>\n";
  }
  std::string finish() {
    out << "</svg>\n";
    return out.str();
  }
};

/// Row and column of a logical index with leading extents flattened.
std::pair<int64_t, int64_t> rowCol(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> coord) {
  int64_t row = 0;
  for (size_t d = 0; d + 1 < shape.size(); ++d) row = row * shape[d] + coord[d];
  return {row, coord.back()};
}
} // namespace

/// `prefix` followed by `value` (built by appending: GCC 12 warns falsely
/// on a literal plus a temporary string).
static std::string tagged(const char *prefix, int64_t value) {
  std::string text(prefix);
  text += std::to_string(value);
  return text;
}

std::string tessel::layout::renderFragmentSvg(const FragmentLayout &l, const std::string &title) {
  llvm::ArrayRef<int64_t> shape = l.getShape();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  Canvas canvas(rows, shape.back(),
                title + " — T thread / r register, " + std::to_string(l.getNumThreads()) +
                    " threads x " + std::to_string(l.getNumRegisters()) + " registers");
  // Owner and replica count of every element.
  std::map<std::pair<int64_t, int64_t>, std::pair<std::pair<int64_t, int64_t>, int>> held;
  for (int64_t t = 0; t < l.getNumThreads(); ++t)
    for (int64_t r = 0; r < l.getNumRegisters(); ++r) {
      llvm::SmallVector<int64_t> coord = l.apply(r, t);
      if (!l.contains(coord)) continue;
      auto key = rowCol(shape, coord);
      auto it = held.find(key);
      if (it == held.end()) held[key] = {{t, r}, 1};
      else ++it->second.second;
    }
  for (auto &[pos, owner] : held) {
    auto [t, r] = owner.first;
    int hue = static_cast<int>((t % 32) * 360 / 32), light = 55 + 25 * static_cast<int>(t / 32 % 2);
    std::string bottom = tagged("r", r);
    if (owner.second > 1) bottom += tagged(" x", owner.second);
    canvas.cell(pos.first, pos.second, hue, light, tagged("T", t), bottom);
  }
  return canvas.finish();
}

std::string tessel::layout::renderSharedSvg(const SharedLayout &l, const std::string &title) {
  std::string caption = title;
  caption += " — bank of each element (";
  caption += l.getSwizzleBytes() ? tagged("", l.getSwizzleBytes()) + "-byte swizzle"
                                 : tagged("pad ", l.getPad());
  caption += ")";
  Canvas canvas(l.getRows(), l.getCols(), caption);
  llvm::ArrayRef<int64_t> shape = l.getShape();
  for (int64_t row = 0; row < l.getRows(); ++row)
    for (int64_t col = 0; col < l.getCols(); ++col) {
      llvm::SmallVector<int64_t> coord(shape.size());
      coord.back() = col;
      int64_t rest = row;
      for (size_t d = shape.size() - 1; d-- > 0;) coord[d] = rest % shape[d], rest /= shape[d];
      int64_t bank = l.bank(coord);
      canvas.cell(row, col, static_cast<int>(bank * 360 / 32), 70, tagged("b", bank),
                  tagged("@", l.apply(coord)));
    }
  return canvas.finish();
}
