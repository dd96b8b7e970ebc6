// Builds against an installed fabric_lib (find_package or pkg-config) and opens an engine.
#include <cstdio>

#include "fabric_lib/fabric_lib.h"

int main() {
  auto engine = fabric_lib::TransferEngineBuilder().provider("tcp").interfaces({"lo"}).build();
  if (!engine.ok()) {
    std::printf("build failed: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  std::printf("consumer: engine on %s, address %s\n", (*engine)->provider().c_str(),
              (*engine)->main_address().to_hex().c_str());
  return 0;
}
