#include "common/imm_wait.h"

#include <string>

namespace fabric_lib::tools {

Status wait_for_imms(ImmCounter& imms, uint32_t imm, uint64_t n, std::chrono::milliseconds timeout, bool exact) {
  CompletionCounter reached;
  FABRIC_LIB_RETURN_IF_ERROR(imms.expect(imm, n, Completion::counter(reached)));
  if (!reached.wait_for(1, timeout)) {
    const uint64_t got = imms.count(imm);
    imms.release(imm);
    return Status(ErrorCode::kDeadlineExceeded,
                  "imm " + std::to_string(imm) + ": " + std::to_string(got) + " of " + std::to_string(n) + " arrived");
  }
  if (reached.errors.load() != 0) return internal_error("imm " + std::to_string(imm) + ": the expectation failed");
  if (exact) {
    const uint64_t extra = imms.count(imm);
    if (extra != 0) {
      imms.release(imm);
      return internal_error("imm " + std::to_string(imm) + ": " + std::to_string(extra) + " more than the " +
                            std::to_string(n) + " expected");
    }
  }
  return ok_status();
}

}  // namespace fabric_lib::tools
