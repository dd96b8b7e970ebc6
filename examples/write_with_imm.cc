// The README's example: two engines (in one process here, for brevity; normally two processes or
// hosts that exchange the descriptor as bytes) move a buffer with one WRITE_WITH_IMM, and the
// receiver learns of it by imm counting.
#include <cstdio>
#include <cstring>
#include <vector>

#include "fabric_lib/fabric_lib.h"

using namespace fabric_lib;

int main() {
  auto make = [] { return TransferEngineBuilder().provider("tcp").interfaces({"lo"}).domains_per_group(2).build(); };
  auto receiver = make();
  auto sender = make();
  if (!receiver.ok() || !sender.ok()) return std::printf("engine: %s\n", receiver.status().to_string().c_str()), 1;

  // Receiver: register a target region and publish its descriptor (bytes/hex travel anywhere).
  std::vector<char> inbox(1 << 20, 0);
  auto target = (*receiver)->register_memory(inbox.data(), inbox.size(), Access::kRemoteWrite);
  if (!target.ok()) return std::printf("register: %s\n", target.status().to_string().c_str()), 1;
  const std::string desc_hex = target->desc.to_hex();

  // Sender: register the source, decode the descriptor, write with imm 42.
  std::vector<char> data(1 << 20, 'x');
  auto source = (*sender)->register_memory(data.data(), data.size(), Access::kLocalOnly);
  auto desc = MrDesc::from_hex(desc_hex);
  if (!source.ok() || !desc.ok()) return 1;
  WriteRequest write{source->handle, 0, *desc, 0, data.size(), /*imm=*/42};
  CompletionCounter sent;
  if (!(*sender)->submit_write(write, Completion::counter(sent)).ok()) return 1;

  // Receiver: expect as many imms as the write produces (it is sharded over 2 domains).
  CompletionCounter arrived;
  (*receiver)->imms().expect(42, imm_count_of(write, (*receiver)->num_domains()), Completion::counter(arrived));
  const bool ok = arrived.wait_for(1, std::chrono::seconds(10)) && sent.wait_for(1, std::chrono::seconds(10)) &&
                  sent.errors == 0 && std::memcmp(inbox.data(), data.data(), data.size()) == 0;
  std::printf("example: %s\n", ok ? "1 MiB arrived, imm counted" : "FAILED");
  return ok ? 0 : 1;
}
