// pipeprop/checkpoint.hpp: checkpoints as a directory of .npy files (xtensor's npy I/O, readable by numpy.load)
// plus a small text manifest, written atomically.
//
// Generic content: a list of named tensors (float32 or float64, any shape) and key/value scalars, plus the signature
// of the network it belongs to (layer count; each layer's parameter tensor names and shapes). Trainers and pipeline
// engines store their state through it (parameters, velocities, step counts, data position, per-stage extras).
//
// Layout of a checkpoint directory <dir>:
//   manifest.txt                      format tag, signature, tensor list (each with zlib's crc32 of its data,
//                                     checked on load), scalars (see save_checkpoint)
//   <tensor name>.npy                 one file per tensor, e.g. layer_03.weight.npy, layer_03.weight.velocity.npy
// Names are exact keys: lookups never match prefixes ("layer_1" never matches "layer_10"; network tensor names use
// zero-padded layer indices, so the two cannot even share a prefix with a dot after it).
//
// Atomicity (docs/pitfalls.md item 10): save_checkpoint writes everything into <dir>.tmp-<pid> (files
// fsync'ed, manifest last), then swaps it with <dir> in one rename (renameat2 RENAME_EXCHANGE on Linux) and removes
// the old content. A failed or interrupted save leaves the previous checkpoint intact. A process killed during a save
// leaves its <dir>.tmp-<pid> (or <dir>.old-<pid>) behind: the next save removes those of processes that no longer
// exist (kill(pid, 0) fails with ESRCH), never those of a live process (a concurrent writer). This assumes the writers
// of one checkpoint path share a PID namespace (one host); a leftover of a reused pid is kept until that pid ends.
// Without RENAME_EXCHANGE the swap is two renames (<dir> to <dir>.old-<pid>, the new one to <dir>); a process killed
// between them leaves the only copy in <dir>.old-<pid>, which the next save or load renames back to <dir>. Entries
// of <dir> that are not the checkpoint's (a metrics file kept there) survive every save as hard links; a <dir> that
// is a symbolic link is written through (checkpoint/save_directories.hpp).
//
// The parts: checkpoint/signature.hpp (network signature, tensor names, checkpoint_error), checkpoint/content.hpp
// (class checkpoint), checkpoint/network_tensors.hpp (parameter and state blocks as tensors),
// checkpoint/npy_files.hpp (.npy files and the manifest), checkpoint/save_directories.hpp (the directories around a
// save), checkpoint/files.hpp (save_checkpoint, load_checkpoint).
#pragma once

#include "pipeprop/checkpoint/content.hpp"
#include "pipeprop/checkpoint/files.hpp"
#include "pipeprop/checkpoint/network_tensors.hpp"
#include "pipeprop/checkpoint/npy_files.hpp"
#include "pipeprop/checkpoint/signature.hpp"
#include "pipeprop/checkpoint/training_state.hpp"
