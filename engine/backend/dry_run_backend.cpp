#include "backend/dry_run_backend.hpp"

#include <algorithm>

namespace nanscope {

// A buffer that exists only as a size, counted in the ledger while it lives.
class DryRunBackend::SizeOnlyStorage final : public Storage {
 public:
  SizeOnlyStorage(std::size_t bytes, const void* owner, std::shared_ptr<Ledger> ledger)
      : bytes_(bytes), owner_(owner), ledger_(std::move(ledger)) {
    ledger_->live += bytes_;
    ledger_->peak = std::max(ledger_->peak, ledger_->live);
  }
  ~SizeOnlyStorage() override { ledger_->live -= bytes_; }
  SizeOnlyStorage(const SizeOnlyStorage&) = delete;
  SizeOnlyStorage& operator=(const SizeOnlyStorage&) = delete;

  std::size_t bytes() const override { return bytes_; }
  const void* owner() const override { return owner_; }

 private:
  std::size_t bytes_;
  const void* owner_;
  std::shared_ptr<Ledger> ledger_;
};

Tensor DryRunBackend::empty(const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(shape, dtype, std::make_shared<SizeOnlyStorage>(bytes, owner_, ledger_));
}

}  // namespace nanscope
