// GEMM strategies: the Eigen GEMM and the factory of strategies by name.
#include <algorithm>
#include <memory>
#include <string_view>

#include "engine/datapath_gemm.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/engine/ops.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/error.hpp"

namespace lpemu::engine {
namespace {

class EigenGemm final : public Gemm {
 public:
  const std::string& name() const override { return name_; }
  void nt(const RowMatrix& a, const RowMatrix& b, RowMatrix& c, const GemmPoint&) const override {
    linear(a, b, Vec<float>(), c);
  }
  void nt(const RowMatrixD& a, const RowMatrixD& b, RowMatrixD& c, const GemmPoint&) const override {
    linear(a, b, Vec<double>(), c);
  }

 private:
  std::string name_ = "eigen";
};

}  // namespace

void Gemm::nt(const RowMatrixD& a, const RowMatrixD& b, RowMatrixD& c, const GemmPoint& p) const {
  const RowMatrix af = a.cast<float>();
  const RowMatrix bf = b.cast<float>();
  RowMatrix cf;
  nt(af, bf, cf, p);
  c = cf.cast<double>();
}

const Gemm& eigen_gemm() {
  static const EigenGemm g;
  return g;
}

GemmFactory GemmFactory::builtin() { return with_datapaths(datapath::DatapathRegistry::builtin()); }

GemmFactory GemmFactory::with_datapaths(const datapath::DatapathRegistry& datapaths) {
  GemmFactory f;
  auto shared = []() { return std::shared_ptr<const Gemm>(&eigen_gemm(), [](const Gemm*) {}); };
  f.add(std::string(datapath::kFloatGemm), shared);
  for (const auto& name : datapaths.names()) f.add_datapath(datapaths.get(name));
  return f;
}

void GemmFactory::add_datapath(const datapath::Datapath& dp) {
  auto strategy = detail::make_datapath_gemm(dp);
  add(dp.name, [strategy]() { return std::shared_ptr<const Gemm>(strategy); });
}

void GemmFactory::add(std::string name, Maker maker) {
  makers_.emplace_back(std::move(name), std::move(maker));
}

bool GemmFactory::knows(std::string_view name) const {
  if (datapath::names_float_gemm(name)) name = datapath::kFloatGemm;
  return std::any_of(makers_.begin(), makers_.end(), [&](const auto& m) { return m.first == name; });
}

std::vector<std::string> GemmFactory::names() const {
  std::vector<std::string> out;
  for (const auto& m : makers_) out.push_back(m.first);
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const Gemm> GemmFactory::make(std::string_view name) const {
  if (datapath::names_float_gemm(name)) name = datapath::kFloatGemm;
  for (auto it = makers_.rbegin(); it != makers_.rend(); ++it) {
    if (it->first == name) return it->second();
  }
  throw UnknownNameError("unknown gemm datapath '" + std::string(name) + "'" +
                         lpemu::detail::closest_names_hint(name, names()));
}

}  // namespace lpemu::engine
