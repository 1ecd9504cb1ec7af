#include "gateway/gateway_metrics.h"

#include "cluster/load_sync.h"
#include "discovery/etcd_discovery.h"
#include "events/subscriber.h"
#include "gateway/fidelity.h"
#include "gateway/tenants.h"
#include "gateway/wait_queue.h"
#include "gateway/worker_pool.h"
#include "kv/prefix_index.h"
#include "routing/router.h"
#include "tokenizer/prefix_cache.h"

namespace kvgate::gateway {

std::string MetricsText(const GatewayMetrics& metrics, const MetricsSources& s) {
  std::string out;
  metrics.requests.Render(out);
  metrics.request_seconds.Render(out);
  metrics.ttft_seconds.Render(out);
  metrics.routed.Render(out);
  metrics.predicted_blocks.Render(out);
  metrics.prompt_blocks.Render(out);
  metrics.retries.Render(out);
  metrics.upstream_errors.Render(out);
  metrics.experts_invalid.Render(out);
  metrics.prompt_fallback.Render(out);
  metrics.pd_requests.Render(out);
  metrics.pd_phase_seconds.Render(out);
  metrics.queue_wait_seconds.Render(out);
  metrics.queue_exits.Render(out);

  CounterFamily in_flight_gauge{
      "kvgate_requests_in_flight", "Client requests in flight.", {}, true};
  in_flight_gauge.Set({}, static_cast<double>(s.in_flight.load()));
  in_flight_gauge.Render(out);
  CounterFamily healthy{
      "kvgate_worker_healthy", "1 when the worker is in routing.", {"worker"}, true};
  CounterFamily active_requests{
      "kvgate_worker_active_requests",
      "Requests routed to the worker and not finished, by this replica (local) or its peers.",
      {"worker", "dp_rank", "source"},
      true};
  CounterFamily active_prefill{"kvgate_worker_active_prefill_tokens",
                               "Prompt tokens routed to the worker awaiting their first token.",
                               {"worker", "dp_rank"},
                               true};
  CounterFamily decode_blocks{"kvgate_worker_active_decode_blocks",
                              "KV blocks of requests decoding on the worker.",
                              {"worker", "dp_rank"},
                              true};
  for (uint32_t slot = 0; slot < s.workers.size(); ++slot) {
    if (!s.workers.present(slot)) continue;
    const std::string& id = s.workers.worker(slot).config.id;
    healthy.Set({id}, s.workers.healthy(slot) ? 1 : 0);
    for (uint32_t rank = 0; rank < s.workers.worker(slot).config.dp_size; ++rank) {
      const routing::WorkerLoad load = s.router.Load({slot, rank});
      const std::string r = std::to_string(rank);
      const routing::LoadView& loads = s.router.loads();
      active_requests.Set({id, r, "local"}, loads.LocalLoad({slot, rank}).requests);
      active_requests.Set({id, r, "peers"}, loads.PeersLoad({slot, rank}).requests);
      active_prefill.Set({id, r}, static_cast<double>(load.prefill_tokens));
      decode_blocks.Set({id, r}, static_cast<double>(load.decode_blocks));
    }
  }
  healthy.Render(out);
  active_requests.Render(out);
  active_prefill.Render(out);
  decode_blocks.Render(out);

  CounterFamily batches{"kvgate_kv_event_batches_total", "KV event batches applied.", {"worker"}};
  CounterFamily invalid{"kvgate_kv_events_invalid_total",
                        "KV events that could not be decoded (skipped).",
                        {"worker"}};
  CounterFamily bad{"kvgate_kv_event_bad_messages_total",
                    "KV event messages with bad frames or payloads.",
                    {"worker"}};
  CounterFamily gaps{
      "kvgate_kv_event_gaps_total", "Sequence gaps in KV event streams.", {"worker"}};
  CounterFamily replays{"kvgate_kv_event_replays_total", "Replay requests sent.", {"worker"}};
  CounterFamily lost{
      "kvgate_kv_event_lost_batches_total", "Batches never recovered after a gap.", {"worker"}};
  CounterFamily restarts{"kvgate_kv_event_restarts_total", "Engine restarts detected.", {"worker"}};
  CounterFamily skipped{"kvgate_kv_stores_skipped_total",
                        "Stored events not applied, by reason.",
                        {"worker", "reason"}};
  CounterFamily removals_kept{"kvgate_kv_removals_kept_total",
                              "Removed block hashes that left the block in the index, by reason.",
                              {"worker", "reason"}};
  for (const auto& [worker, st] : s.subscriber.Stats()) {
    const LabelValues w{s.workers.worker(worker).config.id};
    batches.Add(w, static_cast<double>(st.stream.batches));
    invalid.Add(w, static_cast<double>(st.events[static_cast<size_t>(wire::EventKind::kInvalid)]));
    bad.Add(w, static_cast<double>(st.bad_frames + st.bad_payloads));
    gaps.Add(w, static_cast<double>(st.stream.gaps));
    replays.Add(w, static_cast<double>(st.stream.replays));
    lost.Add(w, static_cast<double>(st.stream.lost_batches));
    restarts.Add(w, static_cast<double>(st.stream.restarts));
    skipped.Add({w[0], "unknown_parent"}, static_cast<double>(st.apply.unknown_parent));
    skipped.Add({w[0], "block_size_mismatch"}, static_cast<double>(st.apply.block_size_mismatch));
    skipped.Add({w[0], "token_count_mismatch"}, static_cast<double>(st.apply.token_count_mismatch));
    removals_kept.Add({w[0], "unknown_block"}, static_cast<double>(st.apply.unknown_removal));
    removals_kept.Add({w[0], "copy_remains"}, static_cast<double>(st.apply.copies_removed));
  }
  for (const CounterFamily* f :
       {&batches, &invalid, &bad, &gaps, &replays, &lost, &restarts, &skipped, &removals_kept}) {
    f->Render(out);
  }
  const kv::IndexStats stats = s.index.Stats();
  CounterFamily index_gauges{"kvgate_index_size", "Prefix index size.", {"what"}, true};
  index_gauges.Set({"blocks"}, static_cast<double>(stats.nodes));
  index_gauges.Set({"entries"}, static_cast<double>(stats.entries));
  index_gauges.Set({"bytes"}, static_cast<double>(stats.approx_bytes));
  index_gauges.Render(out);
  if (s.prompt_cache != nullptr) {
    const tokenizer::PrefixCache::Totals t = s.prompt_cache->totals();
    CounterFamily texts{"kvgate_prompt_cache_texts_total",
                        "Long rendered prompts tokenized through the prompt cache.",
                        {}};
    CounterFamily bytes{"kvgate_prompt_cache_bytes_total",
                        "Their bytes: reused (not tokenized again) or tokenized.",
                        {"kind"}};
    CounterFamily size{"kvgate_prompt_cache_size", "What the prompt cache holds.", {"what"}, true};
    texts.Add({}, static_cast<double>(t.texts));
    bytes.Add({"reused"}, static_cast<double>(t.reused_bytes));
    bytes.Add({"tokenized"}, static_cast<double>(t.tokenized_bytes));
    size.Set({"bytes"}, static_cast<double>(s.prompt_cache->bytes()));
    size.Set({"entries"}, static_cast<double>(s.prompt_cache->entries()));
    for (const CounterFamily* f : {&texts, &bytes, &size}) f->Render(out);
  }

  // docs/design.md §14: the gateway's check of its own view of each worker.
  CounterFamily fidelity_requests{"kvgate_fidelity_requests_total",
                                  "Responses whose prompt token count was compared.",
                                  {"worker"}};
  CounterFamily fidelity_mismatch{
      "kvgate_fidelity_prompt_tokens_mismatch_total",
      "Responses whose engine prompt token count differs from the gateway's.",
      {"worker"}};
  CounterFamily fidelity_cached{
      "kvgate_fidelity_cached_tokens_total",
      "Cached prompt tokens the gateway predicted and the engine reported.",
      {"worker", "kind"}};
  CounterFamily canary{"kvgate_worker_canary",
                       "1 for the result of the worker's last canary.",
                       {"worker", "result"},
                       true};
  for (uint32_t slot = 0; slot < s.fidelity.size() && slot < s.workers.size(); ++slot) {
    if (!s.workers.present(slot)) continue;
    const WorkerFidelity f = s.fidelity.Get(slot);
    const std::string& w = s.workers.worker(slot).config.id;
    fidelity_requests.Add({w}, static_cast<double>(f.requests));
    fidelity_mismatch.Add({w}, static_cast<double>(f.prompt_tokens_mismatch));
    fidelity_cached.Add({w, "predicted"}, static_cast<double>(f.predicted_cached_tokens));
    fidelity_cached.Add({w, "reported"}, static_cast<double>(f.reported_cached_tokens));
    // "error: <why>" is one result; the why is in /admin/workers and the log.
    if (!f.canary.empty()) canary.Set({w, f.canary.substr(0, f.canary.find(':'))}, 1);
  }
  for (const CounterFamily* f :
       {&fidelity_requests, &fidelity_mismatch, &fidelity_cached, &canary}) {
    f->Render(out);
  }

  // Tenants (docs/design.md §13), labelled by their configured names only.
  CounterFamily admitted{
      "kvgate_tenant_admitted_total", "Requests admitted, by tenant.", {"tenant"}};
  CounterFamily rejected{"kvgate_tenant_rejected_total",
                         "Requests turned away with 429, by tenant and the limit they hit.",
                         {"tenant", "reason"}};
  CounterFamily tenant_in_flight{
      "kvgate_tenant_in_flight", "Requests of the tenant in flight.", {"tenant"}, true};
  CounterFamily waiting{
      "kvgate_queue_waiting", "Requests of the tenant waiting for a worker.", {"tenant"}, true};
  const std::map<uint32_t, size_t> waiting_by_tenant = s.queue.WaitingByTenant();
  for (uint32_t t = 0; t < s.tenants.size(); ++t) {
    const std::string& name = s.tenants.config(t).name;
    const Tenants::Counters c = s.tenants.counters(t);
    admitted.Add({name}, static_cast<double>(c.admitted));
    for (size_t r = 0; r < std::size(c.rejected); ++r) {
      rejected.Add({name, std::string(RejectionName(static_cast<Rejection>(r)))},
                   static_cast<double>(c.rejected[r]));
    }
    tenant_in_flight.Set({name}, c.in_flight);
    const auto queued = waiting_by_tenant.find(t);
    waiting.Set({name},
                queued == waiting_by_tenant.end() ? 0 : static_cast<double>(queued->second));
  }
  admitted.Render(out);
  rejected.Render(out);
  tenant_in_flight.Render(out);
  waiting.Render(out);

  // Fleet mode (docs/design.md §11).
  CounterFamily discovered{"kvgate_discovery_workers",
                           "Workers in the gateway, by where they came from.",
                           {"source"},
                           true};
  for (size_t i = 0; i < std::size(kWorkerSourceNames); ++i) {
    discovered.Set({std::string(kWorkerSourceNames[i])},
                   static_cast<double>(s.workers.count(static_cast<WorkerSource>(i))));
  }
  discovered.Render(out);
  metrics.discovery_refused.Render(out);
  if (s.etcd != nullptr) {
    CounterFamily errors{"kvgate_discovery_errors_total",
                         "Failed etcd calls and broken watches (the last known workers stay).",
                         {}};
    errors.Add({}, static_cast<double>(s.etcd->errors()));
    CounterFamily bad{"kvgate_discovery_bad_records_total",
                      "etcd values that are no valid worker record, or were refused.",
                      {}};
    bad.Add({}, static_cast<double>(s.etcd->bad_records()));
    errors.Render(out);
    bad.Render(out);
  }
  if (s.sync != nullptr) {
    const cluster::LoadSyncStats st = s.sync->Stats();
    CounterFamily peers{
        "kvgate_cluster_peers", "Peer replicas heard from in the last 3 s.", {}, true};
    peers.Set({}, static_cast<double>(st.peers));
    CounterFamily connected{"kvgate_cluster_connected", "1 while connected to NATS.", {}, true};
    connected.Set({}, st.connected ? 1 : 0);
    CounterFamily messages{"kvgate_cluster_messages_total",
                           "Load deltas and heartbeats, by what became of them.",
                           {"outcome"}};
    messages.Add({"sent"}, static_cast<double>(st.sent));
    messages.Add({"received"}, static_cast<double>(st.received));
    messages.Add({"send_failed"}, static_cast<double>(st.send_errors));
    messages.Add({"bad"}, static_cast<double>(st.bad_messages));
    messages.Add({"unknown_worker"}, static_cast<double>(st.unknown_workers));
    CounterFamily disconnects{
        "kvgate_cluster_disconnects_total", "Times the NATS connection was lost.", {}};
    disconnects.Add({}, static_cast<double>(st.disconnects));
    CounterFamily dropped{"kvgate_cluster_peer_load_dropped_total",
                          "Times a peer's load was dropped, by reason.",
                          {"reason"}};
    dropped.Add({"silent"}, static_cast<double>(st.peers_expired));
    dropped.Add({"messages_lost"}, static_cast<double>(st.peer_resets));
    for (const CounterFamily* f : {&peers, &connected, &messages, &disconnects, &dropped}) {
      f->Render(out);
    }
  }
  return out;
}

}  // namespace kvgate::gateway
