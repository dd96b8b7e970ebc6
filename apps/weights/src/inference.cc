#include "fabric_lib/weights/inference.h"

#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>

#include "fabric_lib/weights/imm_values.h"
#include "mailbox.h"

namespace fabric_lib::weights {

struct InferenceEndpoint::State {
  TransferEngine* engine = nullptr;
  InferenceOptions options;
  std::shared_ptr<detail::Mailbox> mailbox;
  InferenceMetadata metadata;
  std::vector<MrRegistration> registrations;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<InferenceSetup> setup;
  std::optional<std::string> plan_error;
  bool connected = false;

  void on_message(std::vector<uint8_t> m) {
    Result<MessageKind> kind = message_kind(m);
    if (!kind.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (*kind == MessageKind::kInferenceSetup) {
      Result<InferenceSetup> s = decode_inference_setup(m);
      if (s.ok() && s->plan.rank == options.rank && !setup) setup = std::move(*s);
    } else if (*kind == MessageKind::kPlanError) {
      Result<PlanError> e = decode_plan_error(m);
      if (e.ok() && !plan_error) plan_error = e->message;
    }
    cv.notify_all();
  }
};

InferenceEndpoint::InferenceEndpoint(std::shared_ptr<State> state) : state_(std::move(state)) {}

InferenceEndpoint::~InferenceEndpoint() {
  for (const MrRegistration& r : state_->registrations) (void)state_->engine->unregister_memory(r.handle);
}

Result<std::unique_ptr<InferenceEndpoint>> InferenceEndpoint::create(TransferEngine& engine, InferenceOptions options) {
  if (options.world == 0 || options.rank >= options.world) return invalid_argument("inference endpoint: rank out of range");
  if (options.controller.empty()) return invalid_argument("inference endpoint: no controller address");
  auto st = std::make_shared<State>();
  st->engine = &engine;
  st->options = std::move(options);
  FABRIC_LIB_RETURN_IF_ERROR(detail::open_endpoint(st, engine));
  return std::unique_ptr<InferenceEndpoint>(new InferenceEndpoint(std::move(st)));
}

Result<uint32_t> InferenceEndpoint::add_region(void* ptr, size_t length, MemoryKind kind) {
  State& s = *state_;
  if (s.connected) return Status(ErrorCode::kFailedPrecondition, "inference endpoint: add_region after connect()");
  Result<MrRegistration> reg = s.engine->register_memory(ptr, length, Access::kRemoteWrite, kind);
  if (!reg.ok()) return reg.status();
  s.registrations.push_back(*reg);
  s.metadata.regions.push_back(reg->desc);
  return static_cast<uint32_t>(s.metadata.regions.size() - 1);
}

Status InferenceEndpoint::add_tensor(InferenceTensor tensor) {
  State& s = *state_;
  if (s.connected) return Status(ErrorCode::kFailedPrecondition, "inference endpoint: add_tensor after connect()");
  s.metadata.tensors.push_back(std::move(tensor));
  return ok_status();
}

Status InferenceEndpoint::connect() {
  State& s = *state_;
  if (s.connected) return Status(ErrorCode::kFailedPrecondition, "inference endpoint: connect() called twice");
  s.connected = true;
  const Clock::time_point deadline = Clock::now() + s.options.setup_timeout;
  FABRIC_LIB_RETURN_IF_ERROR(s.mailbox->send(s.options.controller, encode(s.metadata), deadline));
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.cv.wait_until(lock, deadline, [&] { return s.setup.has_value() || s.plan_error.has_value(); })) {
    return Status(ErrorCode::kDeadlineExceeded, "inference rank " + std::to_string(s.options.rank) + ": no setup from the controller");
  }
  if (s.plan_error) return invalid_argument(*s.plan_error);
  return ok_status();
}

const InferenceSetup& InferenceEndpoint::setup() const { return *state_->setup; }
const InferenceMetadata& InferenceEndpoint::metadata() const { return state_->metadata; }

namespace {
// Joins the two expectations of a version: Ok once both fired, the first error otherwise.
struct VersionWait {
  TransferEngine* engine;
  uint64_t version;
  InferenceEndpoint::VersionCallback callback;
  std::mutex mu;
  int remaining = 0;
  bool finished = false;

  void arrive(const Status& st) {
    bool deliver = false, failed = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (finished) return;
      if (!st.ok()) {
        finished = deliver = failed = true;
      } else if (--remaining == 0) {
        finished = deliver = true;
      }
    }
    if (failed) {  // forget what arrived of this version: it can never count as complete
      (void)engine->imms().release(data_imm(version));
      (void)engine->imms().release(done_imm(version));
    }
    if (deliver) callback(version, st.ok() ? st : Status(st.code(), "version " + std::to_string(version) + " incomplete: " + st.message()));
  }
};
}  // namespace

Status InferenceEndpoint::on_version(uint64_t version, std::chrono::milliseconds timeout, VersionCallback callback) {
  State& s = *state_;
  if (!s.setup) return Status(ErrorCode::kFailedPrecondition, "inference endpoint: on_version before connect()");
  if (!callback) return invalid_argument("inference endpoint: no callback");
  auto w = std::make_shared<VersionWait>();
  w->engine = s.engine;
  w->version = version;
  w->callback = std::move(callback);
  const uint64_t data = s.setup->plan.data_imms;
  w->remaining = data > 0 ? 2 : 1;
  const Clock::time_point deadline = Clock::now() + timeout;
  ImmCounter& imms = s.engine->imms();
  Status st = imms.expect(done_imm(version), s.setup->trainers,
                          Completion::callback([w](const Status& x) { w->arrive(x); }).with_deadline(deadline));
  if (!st.ok()) return st;
  if (data > 0) {
    st = imms.expect(data_imm(version), data, Completion::callback([w](const Status& x) { w->arrive(x); }).with_deadline(deadline));
    if (!st.ok()) {
      (void)imms.cancel_expectation(done_imm(version));
      return st;
    }
  }
  return ok_status();
}

Status InferenceEndpoint::wait_for_version(uint64_t version, std::chrono::milliseconds timeout) {
  if (state_->engine->on_callback_thread()) return Status(ErrorCode::kFailedPrecondition, "wait_for_version on the callback thread");
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> f = done->get_future();
  FABRIC_LIB_RETURN_IF_ERROR(on_version(version, timeout, [done](uint64_t, const Status& st) { done->set_value(st); }));
  return f.get();
}

}  // namespace fabric_lib::weights
