#include "fabric_lib/weights/prepare.h"
#include "preparer.h"

namespace fabric_lib::weights::detail {
namespace {

class CpuPreparer final : public Preparer {
 public:
  MemoryKind arena_kind() const override { return MemoryKind::kHost; }
  Result<uint8_t*> arena(uint64_t bytes) override {
    memory_.assign(bytes, 0);
    return memory_.data();
  }
  Status prepare(const PrepareTask& t, DType src_dtype, const uint8_t* src, uint64_t src_pitch, MemoryKind src_kind,
                 uint8_t* out) override {
    if (src_kind != MemoryKind::kHost) return unsupported("the CPU preparer reads host memory only");
    return prepare_on_cpu(t, src_dtype, src, src_pitch, out);
  }
  Status copy_to_host(const uint8_t* src, uint64_t src_pitch, MemoryKind src_kind, uint8_t* dst, uint64_t dst_pitch,
                      uint64_t rows, uint64_t cols, size_t esize) override {
    if (src_kind != MemoryKind::kHost) return unsupported("the CPU preparer reads host memory only");
    copy_box(src, src_pitch, dst, dst_pitch, rows, cols, esize);
    return ok_status();
  }

 private:
  std::vector<uint8_t> memory_;
};

}  // namespace

std::unique_ptr<Preparer> make_cpu_preparer() { return std::make_unique<CpuPreparer>(); }

}  // namespace fabric_lib::weights::detail
