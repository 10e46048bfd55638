// Window arithmetic for Conv and pooling (see ops_conv_util.h).
#include "graph/ops_conv_util.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mpc::conv {
namespace {

std::string List(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }

absl::StatusOr<std::vector<int64_t>> IntsOfSize(const Node& n, const char* name, size_t size, int64_t fallback,
                                                int64_t min_value) {
  std::vector<int64_t> v = n.attrs.GetInts(name, std::vector<int64_t>(size, fallback));
  if (v.size() != size) {
    return absl::InvalidArgumentError(absl::StrCat(name, " ", List(v), " has ", v.size(), " values; the input has ",
                                                   size / (std::string(name) == "pads" ? 2 : 1),
                                                   " spatial axes, so give ", size, " values"));
  }
  for (int64_t x : v) {
    if (x < min_value) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " ", List(v), " has a value below ", min_value, "; every value must be >= ", min_value));
    }
  }
  return v;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<Window> ResolveWindow(const Node& n, const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                                     bool pooling) {
  const size_t r = in.size();
  Window w;
  w.in = in;
  w.kernel = kernel;
  auto stride = IntsOfSize(n, "strides", r, 1, 1);
  if (!stride.ok()) return stride.status();
  auto dilation = IntsOfSize(n, "dilations", r, 1, 1);
  if (!dilation.ok()) return dilation.status();
  auto pads = IntsOfSize(n, "pads", 2 * r, 0, 0);
  if (!pads.ok()) return pads.status();
  w.stride = *stride;
  w.dilation = *dilation;
  const std::string auto_pad = n.attrs.GetString("auto_pad", "NOTSET");
  const bool ceil_mode = pooling && n.attrs.GetInt("ceil_mode", 0) != 0;
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
    return absl::InvalidArgumentError(
        absl::StrCat("auto_pad '", auto_pad, "' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER"));
  }
  if (auto_pad != "NOTSET" && n.attrs.Has("pads")) {
    for (int64_t p : *pads) {
      if (p != 0) {
        return absl::InvalidArgumentError(absl::StrCat("auto_pad ", auto_pad, " and explicit pads ", List(*pads),
                                                       " cannot be combined; drop one of them"));
      }
    }
  }
  w.pad_begin.resize(r);
  w.pad_end.resize(r);
  w.out.resize(r);
  for (size_t i = 0; i < r; ++i) {
    if (kernel[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("kernel ", List(kernel), " has an extent below 1"));
    }
    const int64_t dk = (kernel[i] - 1) * w.dilation[i] + 1;
    const int64_t s = w.stride[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      w.out[i] = CeilDiv(in[i], s);
      const int64_t total = std::max<int64_t>(0, (w.out[i] - 1) * s + dk - in[i]);
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[i] = total - w.pad_begin[i];
    } else {
      w.pad_begin[i] = auto_pad == "VALID" ? 0 : (*pads)[i];
      w.pad_end[i] = auto_pad == "VALID" ? 0 : (*pads)[r + i];
      const int64_t span = in[i] + w.pad_begin[i] + w.pad_end[i] - dk;
      if (span < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("along spatial axis ", i, " the input extent ", in[i], " plus pads ", w.pad_begin[i], "+",
                         w.pad_end[i], " is smaller than the kernel extent ", dk, " (kernel ", kernel[i], ", dilation ",
                         w.dilation[i], "); use a smaller kernel or dilation, or pad the input"));
      }
      if (ceil_mode && auto_pad == "NOTSET") {
        // ONNX (opset <= 17, onnx 1.12 shape inference, and so torch.onnx.export's
        // declared shapes): a last window starting in the end padding is kept, and sees
        // no input. PyTorch itself drops it; see ops_conv_util.h.
        w.out[i] = CeilDiv(span, s) + 1;
        // Opset 19 and later (the importer marks such nodes): ONNX, like PyTorch, drops a
        // last window that would start in the end padding.
        if (n.attrs.GetInt("mpc_ceil_drops_padded_window", 0) != 0 && (w.out[i] - 1) * s >= in[i] + w.pad_begin[i]) {
          --w.out[i];
        }
      } else {
        w.out[i] = span / s + 1;
      }
    }
    if (pooling && (w.pad_begin[i] >= dk || w.pad_end[i] >= dk)) {
      return absl::InvalidArgumentError(absl::StrCat("pads ", w.pad_begin[i], "+", w.pad_end[i], " along spatial axis ",
                                                     i, " must be smaller than the kernel extent ", dk,
                                                     "; reduce the pads"));
    }
  }
  return w;
}

Window2D To2D(const Window& w) {
  Window2D d;
  const int o = w.rank() == 2 ? 1 : 0;  // index of the W axis
  if (w.rank() == 2) {
    d.ih = w.in[0];
    d.kh = w.kernel[0];
    d.oh = w.out[0];
    d.sh = w.stride[0];
    d.dh = w.dilation[0];
    d.pt = w.pad_begin[0];
    d.pb = w.pad_end[0];
  }
  d.iw = w.in[o];
  d.kw = w.kernel[o];
  d.ow = w.out[o];
  d.sw = w.stride[o];
  d.dw = w.dilation[o];
  d.pl = w.pad_begin[o];
  d.pr = w.pad_end[o];
  return d;
}

bool ChannelsLast(const Node& node) { return node.attrs.GetInt("mpc_channels_last", 0) != 0; }

Shape ChannelsFirstView(const Shape& s) {
  Shape out{s[0], s.back()};
  out.insert(out.end(), s.begin() + 1, s.end() - 1);
  return out;
}

Shape ChannelsLastView(const Shape& s) {
  Shape out{s[0]};
  out.insert(out.end(), s.begin() + 2, s.end());
  out.push_back(s[1]);
  return out;
}

Shape AsChannelsFirst(const Node& node, const Shape& s) {
  return ChannelsLast(node) && s.size() >= 2 ? ChannelsFirstView(s) : s;
}

Shape InNodeLayout(const Node& node, const Shape& s) {
  return ChannelsLast(node) && s.size() >= 2 ? ChannelsLastView(s) : s;
}

std::vector<int64_t> ToChannelsLastPerm(int rank) {
  std::vector<int64_t> p{0};
  for (int i = 2; i < rank; ++i) p.push_back(i);
  p.push_back(1);
  return p;
}

std::vector<int64_t> ToChannelsFirstPerm(int rank) {
  std::vector<int64_t> p{0, rank - 1};
  for (int i = 1; i < rank - 1; ++i) p.push_back(i);
  return p;
}

}  // namespace mpc::conv
