#include "support/kv_host.h"

#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

namespace fabric_lib::kv::testing {

namespace {
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t fnv(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Where (layer, kv, page, head-in-rank) starts in a rank's contiguous cache.
uint64_t head_offset(const KvLayout& l, const KvMemoryLayout& m, uint32_t tp_size, uint32_t layer, uint32_t kv, uint32_t page,
                     uint32_t h) {
  const uint64_t hb = l.head_page_bytes();
  const uint32_t n = heads_per_rank(l, tp_size);
  if (m.packing == KvPacking::kStacked) return m.k[layer].offset + page * m.page_stride + (kv * n + h) * hb;
  const KvBufferRef& b = kv == 0 ? m.k[layer] : m.v[layer];
  return b.offset + page * m.page_stride + h * hb;
}
uint32_t kv_count(const KvLayout& l) { return l.kind == AttentionKind::kMla ? 1 : 2; }
}  // namespace

uint8_t kv_byte(uint64_t seed, uint32_t layer, uint32_t kv, uint32_t page, uint32_t head, uint64_t offset) {
  const uint64_t base = mix(seed ^ (uint64_t(layer) << 48) ^ (uint64_t(kv) << 44) ^ (uint64_t(page) << 20) ^ (uint64_t(head) << 4));
  return static_cast<uint8_t>(mix(base + (offset >> 3)) >> ((offset & 7) * 8));
}

uint8_t tail_byte(uint64_t seed, const std::string& request, uint64_t offset) {
  const uint64_t base = mix(seed ^ fnv(reinterpret_cast<const uint8_t*>(request.data()), request.size()));
  return static_cast<uint8_t>(mix(base + (offset >> 3)) >> ((offset & 7) * 8));
}

std::string HostConfig::to_string() const {
  std::ostringstream o;
  o << "provider=" << provider << ",if=" << (interface_name.empty() ? "-" : interface_name) << ",domains=" << domains
    << ",reorder=" << reorder_seed << ",kind=" << int(layout.kind) << ",dtype=" << int(layout.dtype) << ",layers=" << layout.num_layers
    << ",page_tokens=" << layout.page_tokens << ",head_dim=" << layout.head_dim << ",kv_heads=" << layout.kv_heads
    << ",tp_rank=" << rank.tp_rank << ",tp_size=" << rank.tp_size << ",packing=" << int(rank.packing) << ",pages=" << num_pages
    << ",tail_area=" << tail_area << ",seed=" << seed << ",hb=" << heartbeat_ms << ",peer_timeout=" << peer_timeout_ms
    << ",quarantine=" << quarantine_ms << ",confirm=" << confirm_timeout_ms;
  return o.str();
}

HostConfig HostConfig::parse(const std::string& s) {
  HostConfig c;
  std::istringstream in(s);
  std::string kv;
  while (std::getline(in, kv, ',')) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    auto n = [&] { return std::stoull(v); };
    if (k == "provider") c.provider = v;
    else if (k == "if") c.interface_name = v == "-" ? "" : v;
    else if (k == "domains") c.domains = n();
    else if (k == "reorder") c.reorder_seed = n();
    else if (k == "kind") c.layout.kind = static_cast<AttentionKind>(n());
    else if (k == "dtype") c.layout.dtype = static_cast<DType>(n());
    else if (k == "layers") c.layout.num_layers = n();
    else if (k == "page_tokens") c.layout.page_tokens = n();
    else if (k == "head_dim") c.layout.head_dim = n();
    else if (k == "kv_heads") c.layout.kv_heads = n();
    else if (k == "tp_rank") c.rank.tp_rank = n();
    else if (k == "tp_size") c.rank.tp_size = n();
    else if (k == "packing") c.rank.packing = static_cast<KvPacking>(n());
    else if (k == "pages") c.num_pages = n();
    else if (k == "tail_area") c.tail_area = n();
    else if (k == "seed") c.seed = n();
    else if (k == "hb") c.heartbeat_ms = n();
    else if (k == "peer_timeout") c.peer_timeout_ms = n();
    else if (k == "quarantine") c.quarantine_ms = n();
    else if (k == "confirm") c.confirm_timeout_ms = n();
  }
  return c;
}

std::string HostConfig::name() const {
  std::string p = provider;
  if (reorder_seed) p += "_reordered";
  return p + "_" + std::to_string(domains) + "dom";
}

std::vector<HostConfig> provider_matrix() {
  std::vector<HostConfig> out;
  for (size_t d : {1, 4}) {
    HostConfig tcp;
    tcp.domains = d;
    out.push_back(tcp);
    HostConfig shm = tcp;
    shm.provider = "shm";
    shm.interface_name = "";
    out.push_back(shm);
    HostConfig reordered = tcp;
    reordered.reorder_seed = 0x5eed + d;
    out.push_back(reordered);
  }
  return out;
}

Host::Host(const HostConfig& config) : config_(config) {
  TransferEngineBuilder b;
  b.provider(config.provider).domains_per_group(config.domains).simulate_unordered_network(config.reorder_seed);
  if (!config.interface_name.empty()) b.interfaces({config.interface_name});
  auto e = b.build();
  if (!e.ok()) {
    status_ = e.status();
    return;
  }
  engine_ = std::move(e).value();
  layout_ = KvMemoryLayout::contiguous(config.layout, config.rank.tp_size, config.rank.packing, config.num_pages, 0, 0, &cache_bytes_);
  memory_.assign(cache_bytes_ + config.tail_area, 0);
  auto reg = engine_->register_memory(memory_.data(), memory_.size(), Access::kRemoteWrite);
  if (!reg.ok()) {
    status_ = reg.status();
    return;
  }
  reg_ = *reg;
}

Host::~Host() {
  if (engine_) engine_->stop();
}

std::string Host::hash(uint64_t offset, uint64_t length) const {
  if (offset > memory_.size() || length > memory_.size() - offset) return "range";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(fnv(memory_.data() + offset, length)));
  return buf;
}

// --- prefill ------------------------------------------------------------------------------------

PrefillHost::PrefillHost(const HostConfig& config) : Host(config) {
  if (!ok()) return;
  const KvLayout& l = config.layout;
  const uint32_t n = heads_per_rank(l, config.rank.tp_size), first = first_head_of_rank(l, config.rank.tp_rank, config.rank.tp_size);
  const uint64_t hb = l.head_page_bytes();
  for (uint32_t layer = 0; layer < l.num_layers; ++layer)
    for (uint32_t kv = 0; kv < kv_count(l); ++kv)
      for (uint32_t p = 0; p < config.num_pages; ++p)
        for (uint32_t h = 0; h < n; ++h) {
          uint8_t* dst = memory_.data() + head_offset(l, layout_, config.rank.tp_size, layer, kv, p, h);
          for (uint64_t o = 0; o < hb; ++o) dst[o] = kv_byte(config.seed, layer, kv, p, first + h, o);
        }
  PrefillerOptions o;
  o.layout = l;
  o.rank = config.rank;
  o.regions = {reg_};
  o.memory = layout_;
  o.liveness = {std::chrono::milliseconds(config.heartbeat_ms), std::chrono::milliseconds(config.peer_timeout_ms)};
  auto p = Prefiller::create(*engine_, o);
  if (!p.ok()) {
    status_ = p.status();
    return;
  }
  prefiller_ = std::move(p).value();
}

PrefillHost::~PrefillHost() { prefiller_.reset(); }

Status PrefillHost::add(const std::string& id, uint32_t tokens, const std::vector<uint32_t>& pages, uint64_t tail_offset,
                        uint64_t tail_length, std::chrono::milliseconds timeout, uint32_t decode_tp) {
  if (tail_offset > config_.tail_area || tail_length > config_.tail_area - tail_offset) return out_of_range("tail area");
  for (uint64_t i = 0; i < tail_length; ++i) tail_area()[tail_offset + i] = tail_byte(config_.seed, id, i);
  tokens_[id] = tokens;
  PrefillRequest q;
  q.id = id;
  q.num_tokens = tokens;
  q.pages = pages;
  q.tail_region = 0;
  q.tail_offset = cache_bytes_ + tail_offset;
  q.timeout = timeout;
  q.decode_tp = decode_tp;
  return prefiller_->add_request(std::move(q));
}

Status PrefillHost::prefill(const std::vector<std::string>& ids, uint32_t chunk) {
  std::map<std::string, uint32_t> done;
  while (true) {
    std::vector<PassEntry> entries;
    for (const std::string& id : ids) {
      const uint32_t total = tokens_[id];
      uint32_t& cursor = done[id];
      if (cursor >= total) continue;
      cursor = chunk == 0 ? total : std::min(total, cursor + chunk);
      entries.push_back({id, cursor});
    }
    if (entries.empty()) return ok_status();
    auto pass = prefiller_->begin_pass(entries);
    if (!pass.ok()) return pass.status();
    for (uint32_t l = 0; l < config_.layout.num_layers; ++l) FABRIC_LIB_RETURN_IF_ERROR(prefiller_->layer_done(*pass, l));
    FABRIC_LIB_RETURN_IF_ERROR(prefiller_->tail_ready(*pass));
  }
}

// --- decode -------------------------------------------------------------------------------------

DecodeHost::DecodeHost(const HostConfig& config) : Host(config) {
  if (!ok()) return;
  DecoderOptions o;
  o.layout = config.layout;
  o.rank = config.rank;
  o.regions = {reg_};
  o.memory = layout_;
  o.liveness = {std::chrono::milliseconds(config.heartbeat_ms), std::chrono::milliseconds(config.peer_timeout_ms)};
  o.quarantine = std::chrono::milliseconds(config.quarantine_ms);
  o.cancel_confirm_timeout = std::chrono::milliseconds(config.confirm_timeout_ms);
  auto d = Decoder::create(*engine_, o);
  if (!d.ok()) {
    status_ = d.status();
    return;
  }
  decoder_ = std::move(d).value();
}

DecodeHost::~DecodeHost() { decoder_.reset(); }

Status DecodeHost::start(const Started& s, const PrefillInstance& prefill, std::chrono::milliseconds timeout) {
  DecodeRequest q;
  q.id = s.id;
  q.prefill = prefill;
  q.num_tokens = s.tokens;
  q.first_page = s.first_page;
  q.pages = s.pages;
  q.tail_region = 0;
  q.tail_offset = cache_bytes_ + s.tail_offset;
  q.tail_length = s.tail_length;
  q.timeout = timeout;
  Status st = decoder_->start(q);
  if (st.ok()) started_[s.id] = s;
  return st;
}

std::map<std::string, Status> DecodeHost::wait(const std::vector<std::string>& ids, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto missing = [&] {
    for (const std::string& id : ids)
      if (!done_.count(id)) return true;
    return false;
  };
  while (missing()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) break;
    for (FinishedRequest& f : decoder_->wait_finished(std::chrono::duration_cast<std::chrono::milliseconds>(until - now)))
      done_[f.id] = f.status;
  }
  std::map<std::string, Status> out;
  for (const std::string& id : ids)
    if (done_.count(id)) out[id] = done_[id];
  return out;
}

const DecodeHost::Started* DecodeHost::started(const std::string& id) const {
  auto it = started_.find(id);
  return it == started_.end() ? nullptr : &it->second;
}

std::string DecodeHost::verify(const std::string& id) const {
  const Started* s = started(id);
  if (!s) return "not started";
  const KvLayout& l = config_.layout;
  const uint32_t n = heads_per_rank(l, config_.rank.tp_size), first = first_head_of_rank(l, config_.rank.tp_rank, config_.rank.tp_size);
  const uint64_t hb = l.head_page_bytes();
  const uint32_t total = pages_for_tokens(s->tokens, l.page_tokens);
  for (uint32_t k = s->first_page; k < total; ++k) {
    const uint32_t dst = s->pages[k - s->first_page], src = s->src_pages[k];
    for (uint32_t layer = 0; layer < l.num_layers; ++layer)
      for (uint32_t kv = 0; kv < kv_count(l); ++kv)
        for (uint32_t h = 0; h < n; ++h) {
          const uint8_t* got = memory_.data() + head_offset(l, layout_, config_.rank.tp_size, layer, kv, dst, h);
          for (uint64_t o = 0; o < hb; ++o)
            if (got[o] != kv_byte(config_.seed, layer, kv, src, first + h, o))
              return "page " + std::to_string(k) + " (dst " + std::to_string(dst) + ") layer " + std::to_string(layer) +
                     (kv ? " V" : " K") + " head " + std::to_string(first + h) + " byte " + std::to_string(o);
        }
  }
  const uint8_t* tail = memory_.data() + cache_bytes_ + s->tail_offset;
  for (uint64_t i = 0; i < s->tail_length; ++i)
    if (tail[i] != tail_byte(config_.seed, id, i)) return "tail byte " + std::to_string(i);
  return "ok";
}

bool DecodeHost::untouched_pages_zero() const {
  std::set<uint32_t> used;
  for (const auto& [id, s] : started_) used.insert(s.pages.begin(), s.pages.end());
  const KvLayout& l = config_.layout;
  const uint32_t n = heads_per_rank(l, config_.rank.tp_size);
  for (uint32_t p = 0; p < config_.num_pages; ++p) {
    if (used.count(p)) continue;
    for (uint32_t layer = 0; layer < l.num_layers; ++layer)
      for (uint32_t kv = 0; kv < kv_count(l); ++kv)
        for (uint32_t h = 0; h < n; ++h) {
          const uint8_t* b = memory_.data() + head_offset(l, layout_, config_.rank.tp_size, layer, kv, p, h);
          for (uint64_t o = 0; o < l.head_page_bytes(); ++o)
            if (b[o] != 0) return false;
        }
  }
  return true;
}

}  // namespace fabric_lib::kv::testing
