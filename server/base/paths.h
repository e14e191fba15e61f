// Where ktune finds and keeps things when not told: the shipped templates, the cubin cache,
// the SQLite file. The embedded defaults of every program.
//
// Reads the environment; thread-safe as getenv is (nobody sets it while ktune runs).
#ifndef KTUNE_SERVER_BASE_PATHS_H_
#define KTUNE_SERVER_BASE_PATHS_H_

#include <string>

namespace ktune {

// The first that exists of: $KTUNE_TEMPLATES; <program's folder>/../share/ktune/
// kernel_templates (an installed or bundled layout); the source tree's kernel_templates
// (compiled in, for a build tree).
std::string DefaultTemplatesDir();

// $XDG_CACHE_HOME/ktune, else $HOME/.cache/ktune, else /tmp/ktune-$UID. Not created here.
std::string DefaultCacheDir();

// True iff `dir` is one of the folders ktune picks by itself (DefaultCacheDir(), or
// $XDG_RUNTIME_DIR/ktune for the default socket), which it must own alone (MakePrivateDir).
bool IsDefaultKtuneDir(const std::string& dir);

// DefaultCacheDir()/ktune.db: the SQLite file of tuned kernels that ktuned, `ktune tune`
// and `ktune cache` share unless told otherwise.
std::string DefaultDbPath();

// $KTUNE_WORKER, else ktune-worker beside the running program (they are built and
// installed together).
std::string DefaultWorkerPath();

// The idle-compile helper: $KTUNE_WARM, else `ktune-warm` beside this program.
std::string DefaultWarmPath();

// Where ktuned listens and clients connect unless told: $KTUNE_DAEMON, else
// unix://$XDG_RUNTIME_DIR/ktune/ktuned.sock, else unix://DefaultCacheDir()/ktuned.sock.
// (The Python client repeats this rule in client/python/ktune/_client.py.)
std::string DefaultDaemonTarget();

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_PATHS_H_
