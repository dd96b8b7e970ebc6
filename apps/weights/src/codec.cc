#include "fabric_lib/weights/codec.h"

#include "wire.h"

namespace fabric_lib::weights {
namespace {

constexpr uint8_t kMagic[4] = {'F', 'L', 'W', 'M'};
constexpr size_t kMaxName = 1024;
constexpr uint32_t kMaxItems = 1u << 26;
constexpr size_t kMaxDescBytes = 64 * 1024;

void header(wire::Writer& w, MessageKind k) {
  w.bytes(kMagic);
  w.u8(kWeightsFormatVersion);
  w.u8(static_cast<uint8_t>(k));
}

Status bad(const std::string& what) { return malformed("weights message: " + what); }

Status open(wire::Reader& r, MessageKind want) {
  uint8_t m[4], v = 0, k = 0;
  for (uint8_t& b : m) {
    if (!r.u8(b)) return bad("truncated header");
  }
  if (std::memcmp(m, kMagic, 4) != 0) return bad("bad magic");
  if (!r.u8(v)) return bad("truncated header");
  if (v != kWeightsFormatVersion) return bad("unsupported format version " + std::to_string(v));
  if (!r.u8(k)) return bad("truncated header");
  if (k != static_cast<uint8_t>(want)) return bad("unexpected message kind " + std::to_string(k));
  return ok_status();
}

void put_box(wire::Writer& w, const Box& b) {
  w.u64(b.r0);
  w.u64(b.r1);
  w.u64(b.c0);
  w.u64(b.c1);
}
bool get_box(wire::Reader& r, Box& b) {
  return r.u64(b.r0) && r.u64(b.r1) && r.u64(b.c0) && r.u64(b.c1) && b.r0 <= b.r1 && b.c0 <= b.c1;
}
bool get_dtype(wire::Reader& r, DType& t) {
  uint8_t v;
  if (!r.u8(v) || !is_valid_dtype(v)) return false;
  t = static_cast<DType>(v);
  return true;
}
void put_desc(wire::Writer& w, const MrDesc& d) {
  if (d.empty()) {
    w.u32(0);
  } else {
    w.blob(d.to_bytes());
  }
}
bool get_desc(wire::Reader& r, MrDesc& d) {
  std::span<const uint8_t> b;
  if (!r.blob(b, kMaxDescBytes)) return false;
  if (b.empty()) {
    d = MrDesc();
    return true;
  }
  Result<MrDesc> m = MrDesc::from_bytes(b);
  if (!m.ok()) return false;
  d = *m;
  return true;
}
bool get_address(wire::Reader& r, DomainAddress& a) {
  std::span<const uint8_t> b;
  if (!r.blob(b, kMaxDomainAddressBytes) || b.empty()) return false;
  Result<DomainAddress> x = DomainAddress::from_bytes(b);
  if (!x.ok()) return false;
  a = *x;
  return true;
}
void put_shape(wire::Writer& w, const std::vector<uint64_t>& s) {
  w.u8(static_cast<uint8_t>(s.size()));
  for (uint64_t d : s) w.u64(d);
}
bool get_shape(wire::Reader& r, std::vector<uint64_t>& s) {
  uint8_t n;
  if (!r.u8(n) || n > 8) return false;
  s.resize(n);
  for (uint64_t& d : s) {
    if (!r.u64(d)) return false;
  }
  return true;
}

void put_write(wire::Writer& w, const WriteOp& op) {
  w.u32(op.target);
  w.u32(op.domain);
  w.u32(op.pages);
  w.u64(op.length);
  w.u64(op.src_offset);
  w.u64(op.dst_offset);
  w.u64(op.src_stride);
  w.u64(op.dst_stride);
}
constexpr size_t kWriteBytes = 52;
bool get_write(wire::Reader& r, WriteOp& op, size_t targets, uint32_t domains) {
  if (!(r.u32(op.target) && r.u32(op.domain) && r.u32(op.pages) && r.u64(op.length) && r.u64(op.src_offset) &&
        r.u64(op.dst_offset) && r.u64(op.src_stride) && r.u64(op.dst_stride))) {
    return false;
  }
  if (op.target >= targets || op.domain >= domains || op.pages == 0 || op.length == 0) return false;
  if (op.pages > 1 && (op.length > kMaxWrBytes || op.src_stride < op.length || op.dst_stride < op.length)) return false;
  return true;
}
bool get_writes(wire::Reader& r, std::vector<WriteOp>& v, size_t targets, uint32_t domains) {
  uint32_t n;
  if (!r.count(n, kWriteBytes, kMaxItems)) return false;
  v.resize(n);
  for (WriteOp& op : v) {
    if (!get_write(r, op, targets, domains)) return false;
  }
  return true;
}

template <typename T>
Result<T> finish(wire::Reader& r, T value, bool ok, const char* what) {
  if (!ok) return bad(std::string("bad or truncated ") + what);
  if (!r.done()) return bad(std::string("trailing bytes after ") + what);
  return value;
}

}  // namespace

Result<MessageKind> message_kind(std::span<const uint8_t> bytes) {
  if (bytes.size() < 6 || std::memcmp(bytes.data(), kMagic, 4) != 0) return bad("bad magic");
  if (bytes[4] != kWeightsFormatVersion) return bad("unsupported format version");
  if (bytes[5] < 1 || bytes[5] > 7) return bad("unknown message kind");
  return static_cast<MessageKind>(bytes[5]);
}

// --- metadata ---------------------------------------------------------------------------------

std::vector<uint8_t> encode(const TrainerMetadata& m) {
  wire::Writer w;
  header(w, MessageKind::kTrainerHello);
  w.u32(m.rank);
  w.u32(m.world);
  w.blob(m.address.bytes());
  w.u32(m.domains);
  w.u32(static_cast<uint32_t>(m.shards.size()));
  for (const TrainerShard& s : m.shards) {
    w.str(s.name);
    put_shape(w, s.global_shape);
    w.u8(static_cast<uint8_t>(s.dtype));
    put_box(w, s.box);
    w.u32(s.region);
    w.u64(s.offset);
  }
  return w.take();
}

Result<TrainerMetadata> decode_trainer_metadata(std::span<const uint8_t> bytes) {
  wire::Reader r(bytes);
  FABRIC_LIB_RETURN_IF_ERROR(open(r, MessageKind::kTrainerHello));
  TrainerMetadata m;
  uint32_t n = 0;
  bool ok = r.u32(m.rank) && r.u32(m.world) && m.rank < m.world && get_address(r, m.address) && r.u32(m.domains) &&
            m.domains >= 1 && m.domains <= kMaxDomainsPerGroup && r.count(n, 48, kMaxItems);
  if (ok) m.shards.resize(n);
  for (uint32_t i = 0; ok && i < n; ++i) {
    TrainerShard& s = m.shards[i];
    ok = r.str(s.name, kMaxName) && get_shape(r, s.global_shape) && get_dtype(r, s.dtype) && get_box(r, s.box) &&
         r.u32(s.region) && r.u64(s.offset);
  }
  return finish(r, std::move(m), ok, "trainer metadata");
}

std::vector<uint8_t> encode(const InferenceMetadata& m) {
  wire::Writer w;
  header(w, MessageKind::kInferenceHello);
  w.u32(m.rank);
  w.u32(m.world);
  w.blob(m.address.bytes());
  w.u32(m.domains);
  w.u32(static_cast<uint32_t>(m.regions.size()));
  for (const MrDesc& d : m.regions) put_desc(w, d);
  w.u32(static_cast<uint32_t>(m.tensors.size()));
  for (const InferenceTensor& t : m.tensors) {
    w.str(t.name);
    w.u64(t.rows);
    w.u64(t.cols);
    w.u8(static_cast<uint8_t>(t.dtype));
    w.u32(t.region);
    w.u64(t.offset);
    w.u32(t.scale_region);
    w.u64(t.scale_offset);
    w.u32(static_cast<uint32_t>(t.pieces.size()));
    for (const DestPiece& p : t.pieces) {
      w.str(p.source);
      put_box(w, p.src);
      w.u64(p.dst_row);
      w.u64(p.dst_col);
    }
  }
  return w.take();
}

Result<InferenceMetadata> decode_inference_metadata(std::span<const uint8_t> bytes) {
  wire::Reader r(bytes);
  FABRIC_LIB_RETURN_IF_ERROR(open(r, MessageKind::kInferenceHello));
  InferenceMetadata m;
  uint32_t n = 0;
  bool ok = r.u32(m.rank) && r.u32(m.world) && m.rank < m.world && get_address(r, m.address) && r.u32(m.domains) &&
            m.domains >= 1 && m.domains <= kMaxDomainsPerGroup && r.count(n, 4, 1u << 20);
  if (ok) m.regions.resize(n);
  for (uint32_t i = 0; ok && i < n; ++i) ok = get_desc(r, m.regions[i]) && !m.regions[i].empty();
  ok = ok && r.count(n, 47, kMaxItems);
  if (ok) m.tensors.resize(n);
  for (uint32_t i = 0; ok && i < n; ++i) {
    InferenceTensor& t = m.tensors[i];
    uint32_t np = 0;
    ok = r.str(t.name, kMaxName) && r.u64(t.rows) && r.u64(t.cols) && get_dtype(r, t.dtype) && r.u32(t.region) &&
         r.u64(t.offset) && r.u32(t.scale_region) && r.u64(t.scale_offset) && r.count(np, 50, 1u << 20);
    if (ok) t.pieces.resize(np);
    for (uint32_t j = 0; ok && j < np; ++j) {
      DestPiece& p = t.pieces[j];
      ok = r.str(p.source, kMaxName) && get_box(r, p.src) && r.u64(p.dst_row) && r.u64(p.dst_col);
    }
  }
  return finish(r, std::move(m), ok, "inference metadata");
}

// --- schedule ---------------------------------------------------------------------------------

void append_plan(std::vector<uint8_t>& out, const TrainerPlan& p) {
  wire::Writer w;
  w.u32(p.rank);
  w.u32(static_cast<uint32_t>(p.targets.size()));
  for (const Target& t : p.targets) {
    w.u8(static_cast<uint8_t>(t.kind));
    w.u32(t.rank);
    w.u32(t.region);
  }
  w.u32(static_cast<uint32_t>(p.tasks.size()));
  for (const PrepareTask& t : p.tasks) {
    w.u32(t.group);
    w.u8(static_cast<uint8_t>(t.source));
    w.u32(t.index);
    put_box(w, t.box);
    w.u8(static_cast<uint8_t>(t.dtype));
    w.u8(t.direct ? 1 : 0);
    w.u32(static_cast<uint32_t>(t.writes.size()));
    for (const WriteOp& op : t.writes) put_write(w, op);
    w.u32(static_cast<uint32_t>(t.scale_writes.size()));
    for (const WriteOp& op : t.scale_writes) put_write(w, op);
  }
  w.u32(static_cast<uint32_t>(p.staged.size()));
  for (const StagedUnit& s : p.staged) {
    w.u32(s.group);
    w.u8(static_cast<uint8_t>(s.source_dtype));
    put_box(w, s.box);
    w.u64(s.staging_offset);
    w.u32(static_cast<uint32_t>(s.local_parts.size()));
    for (const LocalPart& l : s.local_parts) {
      w.u32(l.shard);
      put_box(w, l.box);
    }
  }
  w.u32(static_cast<uint32_t>(p.contributions.size()));
  for (const Contribution& c : p.contributions) {
    w.u32(c.group);
    w.u32(c.shard);
    put_write(w, c.write);
  }
  w.u32(static_cast<uint32_t>(p.gather_imms.size()));
  for (uint64_t g : p.gather_imms) w.u64(g);
  w.u64(p.staging_bytes);
  std::vector<uint8_t>& b = w.out();
  out.insert(out.end(), b.begin(), b.end());
}

namespace {
bool get_plan(wire::Reader& r, TrainerPlan& p, uint32_t domains, size_t groups) {
  uint32_t n;
  if (!r.u32(p.rank) || !r.count(n, 9, kMaxItems)) return false;
  p.targets.resize(n);
  for (Target& t : p.targets) {
    uint8_t k;
    if (!r.u8(k) || k > 1 || !r.u32(t.rank) || !r.u32(t.region)) return false;
    t.kind = static_cast<Target::Kind>(k);
  }
  if (!r.count(n, 51, kMaxItems)) return false;
  p.tasks.resize(n);
  for (PrepareTask& t : p.tasks) {
    uint8_t src, direct;
    if (!(r.u32(t.group) && t.group < groups && r.u8(src) && src <= 1 && r.u32(t.index) && get_box(r, t.box) &&
          !t.box.empty() && get_dtype(r, t.dtype) && r.u8(direct) && direct <= 1)) {
      return false;
    }
    t.source = static_cast<PrepareTask::Source>(src);
    t.direct = direct == 1;
    if (!get_writes(r, t.writes, p.targets.size(), domains) || !get_writes(r, t.scale_writes, p.targets.size(), domains)) return false;
  }
  if (!r.count(n, 49, kMaxItems)) return false;
  p.staged.resize(n);
  for (StagedUnit& s : p.staged) {
    uint32_t np;
    if (!(r.u32(s.group) && s.group < groups && get_dtype(r, s.source_dtype) && get_box(r, s.box) && !s.box.empty() &&
          r.u64(s.staging_offset) && r.count(np, 36, kMaxItems))) {
      return false;
    }
    s.local_parts.resize(np);
    for (LocalPart& l : s.local_parts) {
      if (!r.u32(l.shard) || !get_box(r, l.box) || !s.box.contains(l.box)) return false;
    }
  }
  for (const PrepareTask& t : p.tasks) {
    if (t.source == PrepareTask::Source::kStaging && t.index >= p.staged.size()) return false;
  }
  if (!r.count(n, 60, kMaxItems)) return false;
  p.contributions.resize(n);
  for (Contribution& c : p.contributions) {
    if (!r.u32(c.group) || c.group >= groups || !r.u32(c.shard) || !get_write(r, c.write, p.targets.size(), domains)) return false;
  }
  if (!r.count(n, 8, 16) || n != groups) return false;
  p.gather_imms.resize(n);
  for (uint64_t& g : p.gather_imms) {
    if (!r.u64(g)) return false;
  }
  return r.u64(p.staging_bytes);
}
}  // namespace

std::vector<uint8_t> encode(const TrainerSetup& m) {
  wire::Writer w;
  header(w, MessageKind::kTrainerSetup);
  w.u32(m.trainers);
  w.u32(m.inference);
  w.u32(m.domains);
  w.u32(static_cast<uint32_t>(m.group_names.size()));
  for (const std::string& g : m.group_names) w.str(g);
  w.u64(m.fingerprint);
  append_plan(w.out(), m.plan);
  w.u32(static_cast<uint32_t>(m.target_descs.size()));
  for (const MrDesc& d : m.target_descs) put_desc(w, d);
  w.u32(static_cast<uint32_t>(m.inference_barrier.size()));
  for (const MrDesc& d : m.inference_barrier) put_desc(w, d);
  return w.take();
}

Result<TrainerSetup> decode_trainer_setup(std::span<const uint8_t> bytes) {
  wire::Reader r(bytes);
  FABRIC_LIB_RETURN_IF_ERROR(open(r, MessageKind::kTrainerSetup));
  TrainerSetup m;
  uint32_t n = 0;
  bool ok = r.u32(m.trainers) && m.trainers >= 1 && r.u32(m.inference) && m.inference >= 1 && r.u32(m.domains) &&
            m.domains >= 1 && m.domains <= kMaxDomainsPerGroup && r.count(n, 2, 16) && n >= 1;
  if (ok) m.group_names.resize(n);
  for (uint32_t i = 0; ok && i < n; ++i) ok = r.str(m.group_names[i], kMaxName);
  ok = ok && r.u64(m.fingerprint) && get_plan(r, m.plan, m.domains, m.group_names.size()) && m.plan.rank < m.trainers;
  ok = ok && r.count(n, 4, kMaxItems) && n == m.plan.targets.size();
  if (ok) m.target_descs.resize(n);
  for (uint32_t i = 0; ok && i < n; ++i) {
    const Target& t = m.plan.targets[i];
    ok = get_desc(r, m.target_descs[i]) &&
         (t.kind == Target::Kind::kInference ? t.rank < m.inference && !m.target_descs[i].empty()
                                             : t.rank < m.trainers && t.region == 0);
  }
  ok = ok && r.count(n, 4, kMaxItems) && n == m.inference;
  if (ok) m.inference_barrier.resize(n);
  for (uint32_t i = 0; ok && i < n; ++i) ok = get_desc(r, m.inference_barrier[i]) && !m.inference_barrier[i].empty();
  return finish(r, std::move(m), ok, "trainer setup");
}

std::vector<uint8_t> encode(const InferenceSetup& m) {
  wire::Writer w;
  header(w, MessageKind::kInferenceSetup);
  w.u32(m.trainers);
  w.u64(m.fingerprint);
  w.u32(m.plan.rank);
  w.u64(m.plan.data_imms);
  w.u64(m.plan.bytes);
  return w.take();
}

Result<InferenceSetup> decode_inference_setup(std::span<const uint8_t> bytes) {
  wire::Reader r(bytes);
  FABRIC_LIB_RETURN_IF_ERROR(open(r, MessageKind::kInferenceSetup));
  InferenceSetup m;
  const bool ok = r.u32(m.trainers) && m.trainers >= 1 && r.u64(m.fingerprint) && r.u32(m.plan.rank) &&
                  r.u64(m.plan.data_imms) && r.u64(m.plan.bytes);
  return finish(r, std::move(m), ok, "inference setup");
}

std::vector<uint8_t> encode(const TrainerReady& m) {
  wire::Writer w;
  header(w, MessageKind::kTrainerReady);
  w.u32(m.rank);
  put_desc(w, m.staging);
  return w.take();
}

Result<TrainerReady> decode_trainer_ready(std::span<const uint8_t> bytes) {
  wire::Reader r(bytes);
  FABRIC_LIB_RETURN_IF_ERROR(open(r, MessageKind::kTrainerReady));
  TrainerReady m;
  const bool ok = r.u32(m.rank) && get_desc(r, m.staging) && !m.staging.empty();
  return finish(r, std::move(m), ok, "trainer ready");
}

std::vector<uint8_t> encode(const Peers& m) {
  wire::Writer w;
  header(w, MessageKind::kPeers);
  w.u32(static_cast<uint32_t>(m.trainer_staging.size()));
  for (const MrDesc& d : m.trainer_staging) put_desc(w, d);
  return w.take();
}

Result<Peers> decode_peers(std::span<const uint8_t> bytes) {
  wire::Reader r(bytes);
  FABRIC_LIB_RETURN_IF_ERROR(open(r, MessageKind::kPeers));
  Peers m;
  uint32_t n = 0;
  bool ok = r.count(n, 4, 1u << 20) && n >= 1;
  if (ok) m.trainer_staging.resize(n);
  for (uint32_t i = 0; ok && i < n; ++i) ok = get_desc(r, m.trainer_staging[i]) && !m.trainer_staging[i].empty();
  return finish(r, std::move(m), ok, "peers");
}

std::vector<uint8_t> encode(const PlanError& m) {
  wire::Writer w;
  header(w, MessageKind::kPlanError);
  std::span<const uint8_t> text(reinterpret_cast<const uint8_t*>(m.message.data()), std::min<size_t>(m.message.size(), 60000));
  w.blob(text);
  return w.take();
}

Result<PlanError> decode_plan_error(std::span<const uint8_t> bytes) {
  wire::Reader r(bytes);
  FABRIC_LIB_RETURN_IF_ERROR(open(r, MessageKind::kPlanError));
  PlanError m;
  std::span<const uint8_t> text;
  const bool ok = r.blob(text, 60000);
  if (ok) m.message.assign(text.begin(), text.end());
  return finish(r, std::move(m), ok, "plan error");
}

}  // namespace fabric_lib::weights
