// The plugin's assembly: the one Plugin object, over the protocols this library carries. Core
// names no protocol; this is where they are plugged in.
#include "core/plugin.h"
#include "protocol/factory.h"

namespace nnf::core {
namespace {
const protocol::Factory kProtocols;
}  // namespace

Plugin* const Plugin::instance_ = new Plugin(kProtocols);

}  // namespace nnf::core
