#include "fabric_lib/weights/controller.h"

#include <condition_variable>
#include <map>
#include <mutex>

#include "fabric_lib/weights/codec.h"
#include "mailbox.h"

namespace fabric_lib::weights {

struct Controller::State {
  TransferEngine* engine = nullptr;
  ControllerOptions options;
  std::shared_ptr<detail::Mailbox> mailbox;
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint32_t, TrainerMetadata> trainers;
  std::map<uint32_t, InferenceMetadata> inference;
  std::map<uint32_t, MrDesc> staging;
  std::string protocol_error;  // the first bad hello (wrong rank or world), reported by run()
  bool ran = false;

  void on_message(std::vector<uint8_t> m) {
    Result<MessageKind> kind = message_kind(m);
    if (!kind.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    switch (*kind) {
      case MessageKind::kTrainerHello: {
        Result<TrainerMetadata> t = decode_trainer_metadata(m);
        if (!t.ok()) break;
        if (t->world != options.trainers || t->rank >= options.trainers) {
          if (protocol_error.empty()) protocol_error = "trainer rank " + std::to_string(t->rank) + " of world " + std::to_string(t->world) + " said hello; the controller expects " + std::to_string(options.trainers) + " trainers";
          break;
        }
        trainers.try_emplace(t->rank, std::move(*t));
        break;
      }
      case MessageKind::kInferenceHello: {
        Result<InferenceMetadata> i = decode_inference_metadata(m);
        if (!i.ok()) break;
        if (i->world != options.inference || i->rank >= options.inference) {
          if (protocol_error.empty()) protocol_error = "inference rank " + std::to_string(i->rank) + " of world " + std::to_string(i->world) + " said hello; the controller expects " + std::to_string(options.inference) + " inference ranks";
          break;
        }
        inference.try_emplace(i->rank, std::move(*i));
        break;
      }
      case MessageKind::kTrainerReady: {
        Result<TrainerReady> r = decode_trainer_ready(m);
        if (r.ok() && r->rank < options.trainers) staging.try_emplace(r->rank, r->staging);
        break;
      }
      default:
        break;
    }
    cv.notify_all();
  }

  std::string missing(bool readies) {
    std::string out;
    for (uint32_t r = 0; r < options.trainers; ++r) {
      if (readies ? !staging.count(r) : !trainers.count(r)) out += " trainer" + std::to_string(r);
    }
    for (uint32_t r = 0; !readies && r < options.inference; ++r) {
      if (!inference.count(r)) out += " inference" + std::to_string(r);
    }
    return out;
  }

  Status send_all_error(const std::string& message, Clock::time_point deadline) {
    const std::vector<uint8_t> bytes = encode(PlanError{message});
    for (auto& [r, t] : trainers) (void)mailbox->send(t.address, bytes, deadline);
    for (auto& [r, i] : inference) (void)mailbox->send(i.address, bytes, deadline);
    return ok_status();
  }
};

Controller::Controller(std::shared_ptr<State> state) : state_(std::move(state)) {}
Controller::~Controller() = default;

Result<std::unique_ptr<Controller>> Controller::create(TransferEngine& engine, ControllerOptions options) {
  if (options.trainers == 0 || options.inference == 0) return invalid_argument("controller: need at least one trainer and one inference rank");
  auto st = std::make_shared<State>();
  st->engine = &engine;
  st->options = std::move(options);
  std::weak_ptr<State> weak = st;
  Result<std::shared_ptr<detail::Mailbox>> mb = detail::Mailbox::create(engine, st->options.frame_bytes, [weak](std::vector<uint8_t> m) {
    if (auto s = weak.lock()) s->on_message(std::move(m));
  });
  if (!mb.ok()) return mb.status();
  st->mailbox = std::move(*mb);
  return std::unique_ptr<Controller>(new Controller(std::move(st)));
}

DomainAddress Controller::address() const { return state_->engine->main_address(); }

Result<Schedule> Controller::run() {
  State& s = *state_;
  const Clock::time_point deadline = Clock::now() + s.options.setup_timeout;
  std::vector<TrainerMetadata> trainers;
  std::vector<InferenceMetadata> inference;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.ran) return Status(ErrorCode::kFailedPrecondition, "controller: run() called twice");
    s.ran = true;
    const bool all = s.cv.wait_until(lock, deadline, [&] {
      return !s.protocol_error.empty() ||
             (s.trainers.size() == s.options.trainers && s.inference.size() == s.options.inference);
    });
    if (!s.protocol_error.empty()) {
      const std::string e = s.protocol_error;
      lock.unlock();
      s.send_all_error("weights controller: " + e, deadline);
      return invalid_argument("weights controller: " + e);
    }
    if (!all) return Status(ErrorCode::kDeadlineExceeded, "weights controller: no hello from" + s.missing(false));
    for (auto& [r, t] : s.trainers) trainers.push_back(t);
    for (auto& [r, i] : s.inference) inference.push_back(i);
  }
  for (const InferenceMetadata& i : inference) {
    if (i.regions.empty()) {
      const std::string e = "weights metadata: inference rank " + std::to_string(i.rank) + " registered no region";
      s.send_all_error(e, deadline);
      return invalid_argument(e);
    }
  }
  Result<Schedule> plan = plan_schedule(trainers, inference, s.options.plan);  // copies: the setups below need the descriptors
  if (!plan.ok()) {
    s.send_all_error(plan.status().message(), deadline);
    return plan.status();
  }
  const uint64_t fp = fingerprint(*plan);
  for (const TrainerMetadata& t : trainers) {
    TrainerSetup setup;
    setup.trainers = s.options.trainers;
    setup.inference = s.options.inference;
    setup.domains = plan->domains;
    setup.group_names = plan->group_names;
    setup.fingerprint = fp;
    setup.plan = plan->trainers[t.rank];
    for (const Target& target : setup.plan.targets) {
      setup.target_descs.push_back(target.kind == Target::Kind::kInference ? inference[target.rank].regions[target.region] : MrDesc());
    }
    for (const InferenceMetadata& i : inference) setup.inference_barrier.push_back(i.regions[0]);
    FABRIC_LIB_RETURN_IF_ERROR(s.mailbox->send(t.address, encode(setup), deadline));
  }
  for (const InferenceMetadata& i : inference) {
    FABRIC_LIB_RETURN_IF_ERROR(s.mailbox->send(i.address, encode(InferenceSetup{s.options.trainers, fp, plan->inference[i.rank]}), deadline));
  }
  Peers peers;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    if (!s.cv.wait_until(lock, deadline, [&] { return s.staging.size() == s.options.trainers; })) {
      return Status(ErrorCode::kDeadlineExceeded, "weights controller: no ready from" + s.missing(true));
    }
    for (auto& [r, d] : s.staging) peers.trainer_staging.push_back(d);
  }
  const std::vector<uint8_t> bytes = encode(peers);
  for (const TrainerMetadata& t : trainers) FABRIC_LIB_RETURN_IF_ERROR(s.mailbox->send(t.address, bytes, deadline));
  return plan;
}

}  // namespace fabric_lib::weights
