/* The arithmetic of RLQS assignments (share.c): I/O-free, time a
 * parameter, so that tests stand on any instant. How a rule's limit is
 * divided among the Envoys that report one of its buckets, and the token
 * bucket each is assigned; docs/rlqs.md says why these numbers keep the
 * fleet within the limit. */
#ifndef RLS_RLQS_SHARE_H
#define RLS_RLQS_SHARE_H

#include <stdint.h>

/* A share of `limit` requests per unit for one participant (an Envoy's
 * report stream of one bucket) among n (>= 1, the participant included)
 * whose demands sum to sum (>= mine >= 1): every participant gets
 * min(floor, limit / n), and what is left is divided in proportion to
 * demand, rounded down. Participants that see the same n and sum get
 * shares that add up to limit at most. Returns the share (0: limit < n
 * and floor 0, or limit 0: nothing). */
uint64_t rls_rlqs_share(uint64_t limit, uint64_t floor, uint64_t n,
                        uint64_t sum, uint64_t mine);

/* The token bucket's size for a share of q requests per unit: q * burst
 * rounded up, at least 1 and at most q (and UINT32_MAX). */
uint32_t rls_rlqs_burst(uint64_t q, double burst);

/* How long a participant's requests are counted before its demand is
 * measured again: rates over a second vary less with the reports'
 * timing than rates over one report (Envoy may report every 100 ms). */
#define RLS_RLQS_DEMAND_MS 1000

/* A participant's demand in requests per unit of unit_s seconds, from its
 * previous demand (0: none yet, or only its first report's) and count
 * requests (allowed and denied) over elapsed_ms (0: a first report, taken
 * as one second's): the mean of the previous demand and this rate, so a
 * change shows at once and is half of it. At least 1 (a participant that
 * asks for nothing still counts: it gets its floor). */
uint64_t rls_rlqs_demand(uint64_t prev, uint64_t count, uint64_t elapsed_ms,
                         uint32_t unit_s);

/* What of a rule's limit is divided: limit * 20 / 21, rounded down. The
 * rest is the headroom that lets an Envoy keep a share up to 5% above
 * its new one (rls_rlqs_share_changed) with the shares still adding up
 * to the limit at most. */
static inline uint64_t rls_rlqs_divided(uint64_t limit)
{
    return (uint64_t)(((unsigned __int128)limit * 20) / 21);
}

/* Whether a new share q replaces the one last assigned (old; have_old 0:
 * none yet): when old is above q by more than 5% and 1 request, or below
 * it by as much. Each replacement hands the Envoy a full bucket again
 * (Envoy keeps its bucket only while the assignment is unchanged), so
 * small moves are not sent; the headroom of rls_rlqs_divided covers an
 * old share kept 5% above the new one, and the 1 request adds at most
 * one per participant. */
int rls_rlqs_share_changed(uint64_t old, int have_old, uint64_t q);

/* When an assignment of ttl_ms sent at sent_ms is renewed (the same one
 * sent again, which Envoy takes as an extension): from half its life. */
static inline int rls_rlqs_renew_due(uint64_t sent_ms, uint64_t ttl_ms,
                                     uint64_t now_ms)
{
    return now_ms >= sent_ms + ttl_ms / 2;
}

/* 1 when an assignment of ttl_ms sent at sent_ms (have 0: none) has run
 * out at now_ms: the Envoy no longer applies it. */
static inline int rls_rlqs_expired(int have, uint64_t sent_ms, uint64_t ttl_ms,
                                   uint64_t now_ms)
{
    return !have || now_ms >= sent_ms + ttl_ms;
}

/* 1 when a bucket last reported with requests in it at active_ms is to be
 * abandoned at now_ms: abandon_s passed without one (0: never). */
static inline int rls_rlqs_abandon_due(uint64_t active_ms, uint32_t abandon_s,
                                       uint64_t now_ms)
{
    return abandon_s > 0 && now_ms >= active_ms + (uint64_t)abandon_s * 1000;
}

#endif
