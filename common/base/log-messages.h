/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log-messages.h -- the MESSAGE_IDs of wsync's key events.  Each one gets
 * an entry in the journal catalog (cause and action), so `journalctl -x`
 * explains it and `journalctl MESSAGE_ID=...` finds every occurrence.
 * Generated with `systemd-id128 new`; never reuse or change one.
 */
#ifndef WSYNC_LOG_MESSAGES_H
#define WSYNC_LOG_MESSAGES_H

#define WSYNC_MID_STARTED             "d9e73e6f243d462191cfed87da146cca"
#define WSYNC_MID_STOPPING            "3b2b44cb28ed40adbe29c475bb12fcee"
#define WSYNC_MID_CONFIG_INVALID      "eeb35c5773a649129688439e73ac5c09"
#define WSYNC_MID_CONFIG_RELOADED     "b1f407a4a20e448b90337e0488203d07"
#define WSYNC_MID_VERSION_PUBLISHED   "57908454f0cb428eadc1dcd4fda879f4"
#define WSYNC_MID_VERSION_APPLIED     "0cccbef5ea254d2ba239818187cb42be"
#define WSYNC_MID_VERIFY_FAILED       "9ac5f03e2e72480b9f12f3571d195000"
#define WSYNC_MID_STORE_UNREACHABLE   "c47c206a07f847ba9334aab4e2cc5d19"
#define WSYNC_MID_STORE_REACHABLE     "d020c6b57b5d44aeba4aed5a767c7db4"
#define WSYNC_MID_HOOK_FAILED         "8b116d8d036841d7b6166e42f73a5331"
#define WSYNC_MID_CHECKPOINT_REJECTED "963d374d06974c9f850506aff6651b0c"
#define WSYNC_MID_HEAD_STALE          "914ba06d10b94e828426cd068bfa8136"
#define WSYNC_MID_NOT_DURABLE         "8870d8b4c444453f82abaf76c5d48a1b"
#define WSYNC_MID_PART_MISSING        "5f0c2b7e9d7a4c1e8b3a6d2f1e0c9b84"
#define WSYNC_MID_WRITER_OTHER        "b0e6a1c44f2d4d7f9a53c2e81d6f0a37"
#define WSYNC_MID_HISTORY_REBUILT     "a97f458ce6d34c63b51950981e4069d5"
#define WSYNC_MID_TRUST_EPOCH         "5836da089a64429a8cd7e800bf823315"

#endif
