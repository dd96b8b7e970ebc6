#include "core/request.h"

#include <algorithm>

#include "core/peer_group_data.h"

namespace fabric_lib::detail {

const MrDesc& Request::target_desc(uint32_t t) const { return group ? group->descs[t] : targets[t]; }
size_t Request::num_targets() const { return group ? group->descs.size() : targets.size(); }

void group_by_domain(Request& request, size_t domains) {
  std::stable_sort(request.wrs.begin(), request.wrs.end(),
                   [](const planner::WrPlan& a, const planner::WrPlan& b) { return a.domain < b.domain; });
  request.domain_begin.assign(domains + 1, 0);
  size_t i = 0;
  for (size_t d = 0; d <= domains; ++d) {
    while (i < request.wrs.size() && request.wrs[i].domain < d) ++i;
    request.domain_begin[d] = static_cast<uint32_t>(i);
  }
  request.domain_begin[domains] = static_cast<uint32_t>(request.wrs.size());
}

}  // namespace fabric_lib::detail
