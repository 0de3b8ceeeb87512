/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tool_inspect_tensors.h -- `wsync inspect` per tensor: what each tensor
 * of a delta's safetensors file costs in the delta (tool_inspect.h's
 * third part).
 */
#ifndef WSYNC_TOOL_INSPECT_TENSORS_H
#define WSYNC_TOOL_INSPECT_TENSORS_H

#include <jansson.h>

#include "delta.h"
#include "error.h"
#include "tool_inspect.h"

/* Tensors listed per file without --tensors: the costliest. */
#define TOOL_INSPECT_TOP_TENSORS 20

/*
 * File e of the delta d per tensor, when it is a safetensors file whose
 * tensors can be named: by the header the delta codes without a base (an
 * anchor's, or one whose header changed length), else by the header of
 * the same file under view->names (a checkpoint folder of the same
 * model; checked: it parses, its tensors end where the file does, and
 * every piece the delta cut at a tensor lies in one tensor of the right
 * float family).  Each tensor gets the bytes of the pieces that cover it
 * (a piece over several split by the bytes each covers, marked
 * estimated, as are the shares of a segment's symbol streams that more
 * than one tensor's FLOAT pieces use) and its changed elements where the
 * pieces tell them; the header and the framing (records, piece and
 * stream tables) get the rest, so that the whole adds up to the file's
 * bytes in the delta exactly.
 *
 * Text (o NULL): prints the table (the TOOL_INSPECT_TOP_TENSORS costliest,
 * or every tensor in file order with view->all_tensors) and returns 1; 0
 * when it prints nothing (not a WRITE of a safetensors file, or no names:
 * a note on stderr when view->names did not fit, else counted in
 * view->unnamed for tool_inspect_tensors_hint).  JSON: sets the members
 * "tensor_names", "tensors", "header" and "framing_bytes" of o, or
 * "tensor_names": null and "tensors_unavailable" (why), and returns 0 or 1
 * likewise.  A negative errno when the delta cannot be read or decoded
 * (err says why).
 */
int tool_inspect_tensors_file(const struct wsync_delta_reader *d,
			      const struct wsync_delta_entry *e,
			      struct tool_inspect_view *view, json_t *o,
			      struct wsync_error *err);

/* Once per run, in text, when files were listed without names for want
 * of a header: how to name them (--names).  Prints nothing otherwise. */
void tool_inspect_tensors_hint(struct tool_inspect_view *view);

#endif
