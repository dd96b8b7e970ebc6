#include "common/pattern.h"
#include "fabric_bench/modes.h"

namespace fabric_lib::bench {

BenchRegions::~BenchRegions() {
  if (engine && src_mr.handle.valid()) engine->unregister_memory(src_mr.handle);
}

Status prepare_regions(Initiator& init, uint64_t bytes, BenchRegions& out) {
  Result<std::vector<std::string>> reply = init.peer().call("region " + std::to_string(bytes));
  if (!reply.ok()) return reply.status();
  if (reply->size() != 2) return malformed("region reply has " + std::to_string(reply->size()) + " words");
  Result<MrDesc> dst = MrDesc::from_hex((*reply)[0]);
  if (!dst.ok()) return dst.status();
  Result<RawRemoteRegion> raw_dst = decode_raw_region((*reply)[1]);
  if (!raw_dst.ok()) return raw_dst.status();
  out.dst = *dst;
  out.raw_dst = *raw_dst;

  out.src = AlignedBuffer(bytes);
  if (!out.src.ok()) return resource_exhausted("cannot allocate " + std::to_string(bytes) + " bytes");
  tools::fill_pattern(out.src.data(), bytes, init.options().seed);
  Result<MrRegistration> mr = init.engine().register_memory(out.src.data(), bytes, Access::kLocalOnly);
  if (!mr.ok()) return mr.status();
  out.src_mr = *mr;
  out.engine = &init.engine();
  Result<RawRemoteRegion> raw_src = init.raw().register_region(out.src.data(), bytes, false);
  if (!raw_src.ok()) return raw_src.status();
  return init.raw().connect(out.raw_dst);
}

}  // namespace fabric_lib::bench
