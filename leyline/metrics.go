package leyline

// Metric names. They follow the Python Esper so dashboards and alert
// rules keep working (ARCHITECTURE.md "Telemetry names"). In Go,
// "compile" means "capture": the compile_* names report graph capture.

// Tolaria epoch metrics (esper-reference.md §3.1.7).
const (
	// MetricTolariaTrainingLoss is the metric "tolaria.training.loss".
	MetricTolariaTrainingLoss = "tolaria.training.loss"
	// MetricTolariaTrainingAccuracy is the metric "tolaria.training.accuracy".
	MetricTolariaTrainingAccuracy = "tolaria.training.accuracy"
	// MetricTolariaValidationLoss is the metric "tolaria.validation.loss",
	// the epoch's validation loss (a Go addition: the reference reports
	// validation figures in its packets, not as metrics).
	MetricTolariaValidationLoss = "tolaria.validation.loss"
	// MetricTolariaValidationAccuracy is the metric
	// "tolaria.validation.accuracy", the epoch's validation accuracy in
	// percent (a Go addition, as MetricTolariaValidationLoss).
	MetricTolariaValidationAccuracy = "tolaria.validation.accuracy"
	// MetricTolariaTrainingLatencyMs is the metric "tolaria.training.latency_ms".
	MetricTolariaTrainingLatencyMs = "tolaria.training.latency_ms"
	// MetricTolariaSeedsActive is the metric "tolaria.seeds.active".
	MetricTolariaSeedsActive = "tolaria.seeds.active"
	// MetricTolariaEpochHookLatencyMs is the metric "tolaria.epoch_hook.latency_ms".
	MetricTolariaEpochHookLatencyMs = "tolaria.epoch_hook.latency_ms"
	// MetricTolariaBreakerState is the metric "tolaria.breaker.state".
	MetricTolariaBreakerState = "tolaria.breaker.state"
	// MetricTolariaModeConservative is the metric "tolaria.mode.conservative".
	MetricTolariaModeConservative = "tolaria.mode.conservative"
	// MetricTolariaEpochsTotal is the metric "tolaria.epochs.total".
	MetricTolariaEpochsTotal = "tolaria.epochs.total"
	// MetricTolariaEpochsFailed is the metric "tolaria.epochs.failed".
	MetricTolariaEpochsFailed = "tolaria.epochs.failed"
	// MetricTolariaHookLatencyMs is the metric "tolaria.hook.latency_ms".
	MetricTolariaHookLatencyMs = "tolaria.hook.latency_ms"
	// MetricTolariaTrainCompileEnabled is the metric "tolaria.train.compile_enabled".
	MetricTolariaTrainCompileEnabled = "tolaria.train.compile_enabled"
	// MetricTolariaTrainAMPEnabled is the metric "tolaria.train.amp_enabled".
	MetricTolariaTrainAMPEnabled = "tolaria.train.amp_enabled"
	// MetricTolariaTrainTF32Enabled is the metric "tolaria.train.tf32_enabled".
	MetricTolariaTrainTF32Enabled = "tolaria.train.tf32_enabled"
	// MetricTolariaTrainForeachEnabled is the metric "tolaria.train.foreach_enabled".
	MetricTolariaTrainForeachEnabled = "tolaria.train.foreach_enabled"
	// MetricTolariaHostSyncs is the metric "tolaria.host_syncs": the
	// host syncs (device-to-host reads, tensor.HostSyncs) of the model's
	// device during an epoch; always 0 on the cpu.
	MetricTolariaHostSyncs = "tolaria.host_syncs"
	// MetricTolariaTrainPinMemory is the metric "tolaria.train.pin_memory".
	MetricTolariaTrainPinMemory = "tolaria.train.pin_memory"
	// MetricTolariaH2DCopyMs is the metric "tolaria.h2d_copy_ms": the
	// time an epoch's input spent on host-to-device copies (the G1 step
	// metric h2d_copy_ms, summed over the epoch's steps and passes).
	MetricTolariaH2DCopyMs = "tolaria.h2d_copy_ms"
	// MetricTolariaTrainGraphEnabled is the metric "tolaria.train.graph_enabled".
	MetricTolariaTrainGraphEnabled = "tolaria.train.graph_enabled"
	// MetricTolariaCompileEnabled is the metric "tolaria.compile_enabled".
	MetricTolariaCompileEnabled = "tolaria.compile_enabled"
	// MetricTolariaCompileFallback is the metric "tolaria.compile_fallback".
	MetricTolariaCompileFallback = "tolaria.compile_fallback"
	// MetricTolariaGraphFallback is the metric "tolaria.graph_fallback".
	MetricTolariaGraphFallback = "tolaria.graph_fallback"
	// MetricTolariaGraphStageCopyMs is the metric "tolaria.graph.stage_copy_ms".
	MetricTolariaGraphStageCopyMs = "tolaria.graph.stage_copy_ms"
	// MetricTolariaGraphCaptureMs is the metric "tolaria.graph.capture_ms".
	MetricTolariaGraphCaptureMs = "tolaria.graph.capture_ms"
	// MetricTolariaGraphReplayMs is the metric "tolaria.graph.replay_ms".
	MetricTolariaGraphReplayMs = "tolaria.graph.replay_ms"
	// MetricTolariaGraphReplaysTotal is the metric "tolaria.graph.replays_total".
	MetricTolariaGraphReplaysTotal = "tolaria.graph.replays_total"
	// MetricTolariaLRControllerEnabled is the metric "tolaria.lr_controller.enabled".
	MetricTolariaLRControllerEnabled = "tolaria.lr_controller.enabled"
	// MetricTolariaLRControllerCurrentLR is the metric "tolaria.lr_controller.current_lr".
	MetricTolariaLRControllerCurrentLR = "tolaria.lr_controller.current_lr"
	// MetricTolariaOptRebuildsTotal is the metric "tolaria.opt.rebuilds_total".
	MetricTolariaOptRebuildsTotal = "tolaria.opt.rebuilds_total"
	// MetricTolariaOptRebuildFailuresTotal is the metric "tolaria.opt.rebuild_failures_total".
	MetricTolariaOptRebuildFailuresTotal = "tolaria.opt.rebuild_failures_total"
	// MetricTolariaOptRebuildLatencyMs is the metric "tolaria.opt.rebuild_latency_ms".
	MetricTolariaOptRebuildLatencyMs = "tolaria.opt.rebuild_latency_ms"
	// MetricTolariaOptRebuildSkippedTotal is the metric "tolaria.opt.rebuild_skipped_total".
	MetricTolariaOptRebuildSkippedTotal = "tolaria.opt.rebuild_skipped_total"
	// MetricTolariaRollbackFastSizeBytes is the metric "tolaria.rollback.fast_size_bytes".
	MetricTolariaRollbackFastSizeBytes = "tolaria.rollback.fast_size_bytes"
	// MetricTolariaRollbackSnapshotsTotal is the metric "tolaria.rollback.snapshots_total".
	MetricTolariaRollbackSnapshotsTotal = "tolaria.rollback.snapshots_total"
	// MetricTolariaRollbackFailuresTotal is the metric "tolaria.rollback.failures_total".
	MetricTolariaRollbackFailuresTotal = "tolaria.rollback.failures_total"
	// MetricTolariaRollbackFastHitsTotal is the metric "tolaria.rollback.fast_hits_total".
	MetricTolariaRollbackFastHitsTotal = "tolaria.rollback.fast_hits_total"
	// MetricTolariaRollbackFastMissesTotal is the metric "tolaria.rollback.fast_misses_total".
	MetricTolariaRollbackFastMissesTotal = "tolaria.rollback.fast_misses_total"
	// MetricTolariaRollbackRestoreLatencyMs is the metric "tolaria.rollback.restore_latency_ms".
	MetricTolariaRollbackRestoreLatencyMs = "tolaria.rollback.restore_latency_ms"
	// MetricTolariaRollbackDeadlineExceededTotal is the metric "tolaria.rollback.deadline_exceeded_total".
	MetricTolariaRollbackDeadlineExceededTotal = "tolaria.rollback.deadline_exceeded_total"
	// MetricTolariaGradAggMicrobatchesTotal is the metric "tolaria.grad_agg.microbatches_total".
	MetricTolariaGradAggMicrobatchesTotal = "tolaria.grad_agg.microbatches_total"
	// MetricTolariaGradAggConflicts is the metric "tolaria.grad_agg.conflicts".
	MetricTolariaGradAggConflicts = "tolaria.grad_agg.conflicts"
	// MetricTolariaGradAggWeightsMean is the metric "tolaria.grad_agg.weights_mean".
	MetricTolariaGradAggWeightsMean = "tolaria.grad_agg.weights_mean"
	// MetricTolariaGradAggPCGradApplied is the metric "tolaria.grad_agg.pcgrad_applied".
	MetricTolariaGradAggPCGradApplied = "tolaria.grad_agg.pcgrad_applied"
	// MetricTolariaGradAggConflictRatio is the metric "tolaria.grad_agg.conflict_ratio".
	MetricTolariaGradAggConflictRatio = "tolaria.grad_agg.conflict_ratio"
	// MetricTolariaGradAggTeacherShare is the metric "tolaria.grad_agg.teacher_share".
	MetricTolariaGradAggTeacherShare = "tolaria.grad_agg.teacher_share"
	// MetricTolariaTimeoutTamiyoTotal is the metric "tolaria.timeout.tamiyo_total".
	MetricTolariaTimeoutTamiyoTotal = "tolaria.timeout.tamiyo_total"
	// MetricTolariaTimeoutKasminaTotal is the metric "tolaria.timeout.kasmina_total".
	MetricTolariaTimeoutKasminaTotal = "tolaria.timeout.kasmina_total"
	// MetricTolariaTimeoutTamiyoLastMs is the metric "tolaria.timeout.tamiyo_last_ms".
	MetricTolariaTimeoutTamiyoLastMs = "tolaria.timeout.tamiyo_last_ms"
	// MetricTolariaTimeoutKasminaLastMs is the metric "tolaria.timeout.kasmina_last_ms".
	MetricTolariaTimeoutKasminaLastMs = "tolaria.timeout.kasmina_last_ms"
	// MetricTolariaTimeoutLateDiscardedTotal is the metric
	// "tolaria.timeout.late_discarded_total": decisions or applies that
	// arrived after their deadline and were discarded (a Go addition).
	MetricTolariaTimeoutLateDiscardedTotal = "tolaria.timeout.late_discarded_total"
	// MetricTolariaErrorTamiyoTotal is the metric "tolaria.error.tamiyo_total":
	// controller calls that failed (a Go addition).
	MetricTolariaErrorTamiyoTotal = "tolaria.error.tamiyo_total"
	// MetricTolariaErrorKasminaTotal is the metric "tolaria.error.kasmina_total":
	// apply calls that failed (a Go addition).
	MetricTolariaErrorKasminaTotal = "tolaria.error.kasmina_total"
	// MetricTolariaProfilerEnabled is the metric "tolaria.profiler.enabled".
	MetricTolariaProfilerEnabled = "tolaria.profiler.enabled"
	// MetricTolariaProfilerTracesEmittedTotal is the metric "tolaria.profiler.traces_emitted_total".
	MetricTolariaProfilerTracesEmittedTotal = "tolaria.profiler.traces_emitted_total"
	// MetricTolariaProfilerTracesFailedTotal is the metric "tolaria.profiler.traces_failed_total".
	MetricTolariaProfilerTracesFailedTotal = "tolaria.profiler.traces_failed_total"
	// MetricTolariaEmergencyHaltsTotal is the metric "tolaria.emergency.halts_total".
	MetricTolariaEmergencyHaltsTotal = "tolaria.emergency.halts_total"
	// MetricTolariaEmergencyHalt is the metric "tolaria.emergency.halt".
	MetricTolariaEmergencyHalt = "tolaria.emergency.halt"
	// MetricTolariaEmergencyBroadcastsTotal is the metric "tolaria.emergency.broadcasts_total".
	MetricTolariaEmergencyBroadcastsTotal = "tolaria.emergency.broadcasts_total"
	// MetricTolariaEmergencyBroadcastFailuresTotal is the metric "tolaria.emergency.broadcast_failures_total".
	MetricTolariaEmergencyBroadcastFailuresTotal = "tolaria.emergency.broadcast_failures_total"
	// MetricTolariaEmergencyLastBroadcastLatencyMs is the metric "tolaria.emergency.last_broadcast_latency_ms".
	MetricTolariaEmergencyLastBroadcastLatencyMs = "tolaria.emergency.last_broadcast_latency_ms"
	// MetricTolariaEmergencyBypassAppliedTotal is the metric "tolaria.emergency.bypass_applied_total".
	MetricTolariaEmergencyBypassAppliedTotal = "tolaria.emergency.bypass_applied_total"
	// MetricTolariaEmergencySharedSignalMode is the metric "tolaria.emergency.shared_signal_mode".
	MetricTolariaEmergencySharedSignalMode = "tolaria.emergency.shared_signal_mode"
)

// Tolaria per-seed gradient aggregation metrics (§3.1.4), with attributes seed_id and stage.
const (
	// MetricTolariaGradAggSeedWeight is the metric "tolaria.grad_agg.seed.weight".
	MetricTolariaGradAggSeedWeight = "tolaria.grad_agg.seed.weight"
	// MetricTolariaGradAggSeedNorm is the metric "tolaria.grad_agg.seed.norm".
	MetricTolariaGradAggSeedNorm = "tolaria.grad_agg.seed.norm"
	// MetricTolariaGradAggSeedShare is the metric "tolaria.grad_agg.seed.share".
	MetricTolariaGradAggSeedShare = "tolaria.grad_agg.seed.share"
	// MetricTolariaGradAggSeedShareDelta is the metric "tolaria.grad_agg.seed.share_delta".
	MetricTolariaGradAggSeedShareDelta = "tolaria.grad_agg.seed.share_delta"
	// MetricTolariaGradAggSeedAlpha is the metric "tolaria.grad_agg.seed.alpha".
	MetricTolariaGradAggSeedAlpha = "tolaria.grad_agg.seed.alpha"
	// MetricTolariaGradAggSeedConflicts is the metric "tolaria.grad_agg.seed.conflicts".
	MetricTolariaGradAggSeedConflicts = "tolaria.grad_agg.seed.conflicts"
	// MetricTolariaGradAggSeedConflictRatio is the metric "tolaria.grad_agg.seed.conflict_ratio".
	MetricTolariaGradAggSeedConflictRatio = "tolaria.grad_agg.seed.conflict_ratio"
	// MetricTolariaGradAggSeedParams is the metric "tolaria.grad_agg.seed.params".
	MetricTolariaGradAggSeedParams = "tolaria.grad_agg.seed.params"
	// MetricTolariaGradAggSeedMaskFraction is the metric "tolaria.grad_agg.seed.mask_fraction".
	MetricTolariaGradAggSeedMaskFraction = "tolaria.grad_agg.seed.mask_fraction"
	// MetricTolariaGradAggSeedTeacherShare is the metric "tolaria.grad_agg.seed.teacher_share".
	MetricTolariaGradAggSeedTeacherShare = "tolaria.grad_agg.seed.teacher_share"
	// MetricTolariaGradAggSeedLayerNorm is the metric "tolaria.grad_agg.seed.layer_norm".
	MetricTolariaGradAggSeedLayerNorm = "tolaria.grad_agg.seed.layer_norm"
)

// Tamiyo metrics (§4.4).
const (
	// MetricTamiyoValidationLoss is the metric "tamiyo.validation_loss".
	MetricTamiyoValidationLoss = "tamiyo.validation_loss"
	// MetricTamiyoLossDelta is the metric "tamiyo.loss_delta".
	MetricTamiyoLossDelta = "tamiyo.loss_delta"
	// MetricTamiyoConservativeMode is the metric "tamiyo.conservative_mode".
	MetricTamiyoConservativeMode = "tamiyo.conservative_mode"
	// MetricTamiyoInferenceLatencyMs is the metric "tamiyo.inference.latency_ms".
	MetricTamiyoInferenceLatencyMs = "tamiyo.inference.latency_ms"
	// MetricTamiyoGNNInferenceLatencyMs is the metric "tamiyo.gnn.inference.latency_ms".
	MetricTamiyoGNNInferenceLatencyMs = "tamiyo.gnn.inference.latency_ms"
	// MetricTamiyoGNNCompileEnabled is the metric "tamiyo.gnn.compile_enabled".
	MetricTamiyoGNNCompileEnabled = "tamiyo.gnn.compile_enabled"
	// MetricTamiyoGNNCompileWarmMs is the metric "tamiyo.gnn.compile_warm_ms".
	MetricTamiyoGNNCompileWarmMs = "tamiyo.gnn.compile_warm_ms"
	// MetricTamiyoGNNCompileFallbackTotal is the metric "tamiyo.gnn.compile_fallback_total".
	MetricTamiyoGNNCompileFallbackTotal = "tamiyo.gnn.compile_fallback_total"
	// MetricTamiyoGNNFeatureCoverage is the metric "tamiyo.gnn.feature_coverage".
	MetricTamiyoGNNFeatureCoverage = "tamiyo.gnn.feature_coverage"
	// MetricTamiyoFallbackSeed is the metric "tamiyo.fallback.seed".
	MetricTamiyoFallbackSeed = "tamiyo.fallback.seed"
	// MetricTamiyoFallbackBlueprint is the metric "tamiyo.fallback.blueprint".
	MetricTamiyoFallbackBlueprint = "tamiyo.fallback.blueprint"
	// MetricTamiyoFallbackSyntheticPause is the metric "tamiyo.fallback.synthetic_pause".
	MetricTamiyoFallbackSyntheticPause = "tamiyo.fallback.synthetic_pause"
	// MetricTamiyoFallbackRuntime is the metric "tamiyo.fallback.runtime".
	MetricTamiyoFallbackRuntime = "tamiyo.fallback.runtime"
	// MetricTamiyoPolicyValueEstimate is the metric "tamiyo.policy.value_estimate".
	MetricTamiyoPolicyValueEstimate = "tamiyo.policy.value_estimate"
	// MetricTamiyoPolicyRiskIndex is the metric "tamiyo.policy.risk_index".
	MetricTamiyoPolicyRiskIndex = "tamiyo.policy.risk_index"
	// MetricTamiyoPolicyRiskScore is the metric "tamiyo.policy.risk_score".
	MetricTamiyoPolicyRiskScore = "tamiyo.policy.risk_score"
	// MetricTamiyoBlendingMethodIndex is the metric "tamiyo.blending.method_index".
	MetricTamiyoBlendingMethodIndex = "tamiyo.blending.method_index"
	// MetricTamiyoBlendingScheduleStart is the metric "tamiyo.blending.schedule_start".
	MetricTamiyoBlendingScheduleStart = "tamiyo.blending.schedule_start"
	// MetricTamiyoBlendingScheduleEnd is the metric "tamiyo.blending.schedule_end".
	MetricTamiyoBlendingScheduleEnd = "tamiyo.blending.schedule_end"
	// MetricTamiyoSelectionSeedIndex is the metric "tamiyo.selection.seed_index".
	MetricTamiyoSelectionSeedIndex = "tamiyo.selection.seed_index"
	// MetricTamiyoSelectionSeedScore is the metric "tamiyo.selection.seed_score".
	MetricTamiyoSelectionSeedScore = "tamiyo.selection.seed_score"
	// MetricTamiyoSelectionBlueprintIndex is the metric "tamiyo.selection.blueprint_index".
	MetricTamiyoSelectionBlueprintIndex = "tamiyo.selection.blueprint_index"
	// MetricTamiyoBreakerInferenceState is the metric "tamiyo.breaker.inference_state".
	MetricTamiyoBreakerInferenceState = "tamiyo.breaker.inference_state"
	// MetricTamiyoBreakerMetadataState is the metric "tamiyo.breaker.metadata_state".
	MetricTamiyoBreakerMetadataState = "tamiyo.breaker.metadata_state"
	// MetricTamiyoBreakerInferenceFailures is the metric "tamiyo.breaker.inference_failures".
	MetricTamiyoBreakerInferenceFailures = "tamiyo.breaker.inference_failures"
	// MetricTamiyoBreakerMetadataFailures is the metric "tamiyo.breaker.metadata_failures".
	MetricTamiyoBreakerMetadataFailures = "tamiyo.breaker.metadata_failures"
	// MetricTamiyoBlueprintRisk is the metric "tamiyo.blueprint.risk".
	MetricTamiyoBlueprintRisk = "tamiyo.blueprint.risk"
	// MetricTamiyoFieldReportsPublishedTotal is the metric "tamiyo.field_reports.published_total".
	MetricTamiyoFieldReportsPublishedTotal = "tamiyo.field_reports.published_total"
	// MetricTamiyoFieldReportsRetriesTotal is the metric "tamiyo.field_reports.retries_total".
	MetricTamiyoFieldReportsRetriesTotal = "tamiyo.field_reports.retries_total"
	// MetricTamiyoFieldReportsDroppedTotal is the metric "tamiyo.field_reports.dropped_total".
	MetricTamiyoFieldReportsDroppedTotal = "tamiyo.field_reports.dropped_total"
	// MetricTamiyoFieldReportsPendingTotal is the metric "tamiyo.field_reports.pending_total".
	MetricTamiyoFieldReportsPendingTotal = "tamiyo.field_reports.pending_total"
)

// Kasmina per-seed metrics (§2.6), with attribute seed_id.
const (
	// MetricKasminaSeedStage is the metric "kasmina.seed.stage".
	MetricKasminaSeedStage = "kasmina.seed.stage"
	// MetricKasminaSeedAlpha is the metric "kasmina.seed.alpha".
	MetricKasminaSeedAlpha = "kasmina.seed.alpha"
	// MetricKasminaSeedKernelAttached is the metric "kasmina.seed.kernel_attached".
	MetricKasminaSeedKernelAttached = "kasmina.seed.kernel_attached"
	// MetricKasminaSeedKernelLatencyMs is the metric "kasmina.seed.kernel_latency_ms".
	MetricKasminaSeedKernelLatencyMs = "kasmina.seed.kernel_latency_ms"
	// MetricKasminaSeedLastKernelLatencyMs is the metric "kasmina.seed.last_kernel_latency_ms".
	MetricKasminaSeedLastKernelLatencyMs = "kasmina.seed.last_kernel_latency_ms"
	// MetricKasminaSeedIsolationViolations is the metric "kasmina.seed.isolation_violations".
	MetricKasminaSeedIsolationViolations = "kasmina.seed.isolation_violations"
	// MetricKasminaSeedFallbackUsed is the metric "kasmina.seed.fallback_used".
	MetricKasminaSeedFallbackUsed = "kasmina.seed.fallback_used"
	// MetricKasminaSeedAlphaSteps is the metric "kasmina.seed.alpha_steps".
	MetricKasminaSeedAlphaSteps = "kasmina.seed.alpha_steps"
	// MetricKasminaSeedIsolationDot is the metric "kasmina.seed.isolation.dot".
	MetricKasminaSeedIsolationDot = "kasmina.seed.isolation.dot"
	// MetricKasminaSeedIsolationHostNorm is the metric "kasmina.seed.isolation.host_norm".
	MetricKasminaSeedIsolationHostNorm = "kasmina.seed.isolation.host_norm"
	// MetricKasminaSeedIsolationSeedNorm is the metric "kasmina.seed.isolation.seed_norm".
	MetricKasminaSeedIsolationSeedNorm = "kasmina.seed.isolation.seed_norm"
)

// Kasmina global metrics (§2.6).
const (
	// MetricKasminaSeedsActive is the metric "kasmina.seeds.active".
	MetricKasminaSeedsActive = "kasmina.seeds.active"
	// MetricKasminaIsolationViolations is the metric "kasmina.isolation.violations".
	MetricKasminaIsolationViolations = "kasmina.isolation.violations"
	// MetricKasminaPrewarmLatencyMs is the metric "kasmina.prewarm.latency_ms".
	MetricKasminaPrewarmLatencyMs = "kasmina.prewarm.latency_ms"
	// MetricKasminaKernelFetchLatencyMs is the metric "kasmina.kernel.fetch_latency_ms".
	MetricKasminaKernelFetchLatencyMs = "kasmina.kernel.fetch_latency_ms"
	// MetricKasminaBreakerState is the metric "kasmina.breaker.state".
	MetricKasminaBreakerState = "kasmina.breaker.state"
	// MetricKasminaBreakerFailures is the metric "kasmina.breaker.failures".
	MetricKasminaBreakerFailures = "kasmina.breaker.failures"
	// MetricKasminaCacheKernelSize is the metric "kasmina.cache.kernel_size".
	MetricKasminaCacheKernelSize = "kasmina.cache.kernel_size"
	// MetricKasminaCacheKernelHitRate is the metric "kasmina.cache.kernel_hit_rate".
	MetricKasminaCacheKernelHitRate = "kasmina.cache.kernel_hit_rate"
	// MetricKasminaCacheKernelEvictions is the metric "kasmina.cache.kernel_evictions".
	MetricKasminaCacheKernelEvictions = "kasmina.cache.kernel_evictions"
	// MetricKasminaCacheGPUSize is the metric "kasmina.cache.gpu_size".
	MetricKasminaCacheGPUSize = "kasmina.cache.gpu_size"
	// MetricKasminaCacheGPUCapacity is the metric "kasmina.cache.gpu_capacity".
	MetricKasminaCacheGPUCapacity = "kasmina.cache.gpu_capacity"
	// MetricKasminaCacheGPUHitRate is the metric "kasmina.cache.gpu_hit_rate".
	MetricKasminaCacheGPUHitRate = "kasmina.cache.gpu_hit_rate"
	// MetricKasminaCacheGPUEvictions is the metric "kasmina.cache.gpu_evictions".
	MetricKasminaCacheGPUEvictions = "kasmina.cache.gpu_evictions"
	// MetricKasminaCacheTelemetrySize is the metric "kasmina.cache.telemetry_size".
	MetricKasminaCacheTelemetrySize = "kasmina.cache.telemetry_size"
	// MetricKasminaRollbackLatencyMs is the metric "kasmina.rollback.latency_ms".
	MetricKasminaRollbackLatencyMs = "kasmina.rollback.latency_ms"
)

// MetricNames returns every metric name constant of this package, for
// validation and documentation.
func MetricNames() []string {
	return []string{
		MetricTolariaTrainingLoss,
		MetricTolariaTrainingAccuracy,
		MetricTolariaValidationLoss,
		MetricTolariaValidationAccuracy,
		MetricTolariaTrainingLatencyMs,
		MetricTolariaSeedsActive,
		MetricTolariaEpochHookLatencyMs,
		MetricTolariaBreakerState,
		MetricTolariaModeConservative,
		MetricTolariaEpochsTotal,
		MetricTolariaEpochsFailed,
		MetricTolariaHookLatencyMs,
		MetricTolariaTrainCompileEnabled,
		MetricTolariaTrainAMPEnabled,
		MetricTolariaTrainTF32Enabled,
		MetricTolariaTrainForeachEnabled,
		MetricTolariaHostSyncs,
		MetricTolariaTrainPinMemory,
		MetricTolariaH2DCopyMs,
		MetricTolariaTrainGraphEnabled,
		MetricTolariaCompileEnabled,
		MetricTolariaCompileFallback,
		MetricTolariaGraphFallback,
		MetricTolariaGraphStageCopyMs,
		MetricTolariaGraphCaptureMs,
		MetricTolariaGraphReplayMs,
		MetricTolariaGraphReplaysTotal,
		MetricTolariaLRControllerEnabled,
		MetricTolariaLRControllerCurrentLR,
		MetricTolariaOptRebuildsTotal,
		MetricTolariaOptRebuildFailuresTotal,
		MetricTolariaOptRebuildLatencyMs,
		MetricTolariaOptRebuildSkippedTotal,
		MetricTolariaRollbackFastSizeBytes,
		MetricTolariaRollbackSnapshotsTotal,
		MetricTolariaRollbackFailuresTotal,
		MetricTolariaRollbackFastHitsTotal,
		MetricTolariaRollbackFastMissesTotal,
		MetricTolariaRollbackRestoreLatencyMs,
		MetricTolariaRollbackDeadlineExceededTotal,
		MetricTolariaGradAggMicrobatchesTotal,
		MetricTolariaGradAggConflicts,
		MetricTolariaGradAggWeightsMean,
		MetricTolariaGradAggPCGradApplied,
		MetricTolariaGradAggConflictRatio,
		MetricTolariaGradAggTeacherShare,
		MetricTolariaTimeoutTamiyoTotal,
		MetricTolariaTimeoutKasminaTotal,
		MetricTolariaTimeoutTamiyoLastMs,
		MetricTolariaTimeoutKasminaLastMs,
		MetricTolariaTimeoutLateDiscardedTotal,
		MetricTolariaErrorTamiyoTotal,
		MetricTolariaErrorKasminaTotal,
		MetricTolariaProfilerEnabled,
		MetricTolariaProfilerTracesEmittedTotal,
		MetricTolariaProfilerTracesFailedTotal,
		MetricTolariaEmergencyHaltsTotal,
		MetricTolariaEmergencyHalt,
		MetricTolariaEmergencyBroadcastsTotal,
		MetricTolariaEmergencyBroadcastFailuresTotal,
		MetricTolariaEmergencyLastBroadcastLatencyMs,
		MetricTolariaEmergencyBypassAppliedTotal,
		MetricTolariaEmergencySharedSignalMode,
		MetricTolariaGradAggSeedWeight,
		MetricTolariaGradAggSeedNorm,
		MetricTolariaGradAggSeedShare,
		MetricTolariaGradAggSeedShareDelta,
		MetricTolariaGradAggSeedAlpha,
		MetricTolariaGradAggSeedConflicts,
		MetricTolariaGradAggSeedConflictRatio,
		MetricTolariaGradAggSeedParams,
		MetricTolariaGradAggSeedMaskFraction,
		MetricTolariaGradAggSeedTeacherShare,
		MetricTolariaGradAggSeedLayerNorm,
		MetricTamiyoValidationLoss,
		MetricTamiyoLossDelta,
		MetricTamiyoConservativeMode,
		MetricTamiyoInferenceLatencyMs,
		MetricTamiyoGNNInferenceLatencyMs,
		MetricTamiyoGNNCompileEnabled,
		MetricTamiyoGNNCompileWarmMs,
		MetricTamiyoGNNCompileFallbackTotal,
		MetricTamiyoGNNFeatureCoverage,
		MetricTamiyoFallbackSeed,
		MetricTamiyoFallbackBlueprint,
		MetricTamiyoFallbackSyntheticPause,
		MetricTamiyoFallbackRuntime,
		MetricTamiyoPolicyValueEstimate,
		MetricTamiyoPolicyRiskIndex,
		MetricTamiyoPolicyRiskScore,
		MetricTamiyoBlendingMethodIndex,
		MetricTamiyoBlendingScheduleStart,
		MetricTamiyoBlendingScheduleEnd,
		MetricTamiyoSelectionSeedIndex,
		MetricTamiyoSelectionSeedScore,
		MetricTamiyoSelectionBlueprintIndex,
		MetricTamiyoBreakerInferenceState,
		MetricTamiyoBreakerMetadataState,
		MetricTamiyoBreakerInferenceFailures,
		MetricTamiyoBreakerMetadataFailures,
		MetricTamiyoBlueprintRisk,
		MetricTamiyoFieldReportsPublishedTotal,
		MetricTamiyoFieldReportsRetriesTotal,
		MetricTamiyoFieldReportsDroppedTotal,
		MetricTamiyoFieldReportsPendingTotal,
		MetricKasminaSeedStage,
		MetricKasminaSeedAlpha,
		MetricKasminaSeedKernelAttached,
		MetricKasminaSeedKernelLatencyMs,
		MetricKasminaSeedLastKernelLatencyMs,
		MetricKasminaSeedIsolationViolations,
		MetricKasminaSeedFallbackUsed,
		MetricKasminaSeedAlphaSteps,
		MetricKasminaSeedIsolationDot,
		MetricKasminaSeedIsolationHostNorm,
		MetricKasminaSeedIsolationSeedNorm,
		MetricKasminaSeedsActive,
		MetricKasminaIsolationViolations,
		MetricKasminaPrewarmLatencyMs,
		MetricKasminaKernelFetchLatencyMs,
		MetricKasminaBreakerState,
		MetricKasminaBreakerFailures,
		MetricKasminaCacheKernelSize,
		MetricKasminaCacheKernelHitRate,
		MetricKasminaCacheKernelEvictions,
		MetricKasminaCacheGPUSize,
		MetricKasminaCacheGPUCapacity,
		MetricKasminaCacheGPUHitRate,
		MetricKasminaCacheGPUEvictions,
		MetricKasminaCacheTelemetrySize,
		MetricKasminaRollbackLatencyMs,
	}
}

// counterMetrics are the metrics that count since the emitter started:
// they never decrease during a run (a new process, a resume included,
// may start them again from its own count).
var counterMetrics = map[string]bool{
	MetricTolariaEpochsTotal:                     true,
	MetricTolariaGraphReplaysTotal:               true,
	MetricTolariaOptRebuildsTotal:                true,
	MetricTolariaOptRebuildFailuresTotal:         true,
	MetricTolariaOptRebuildSkippedTotal:          true,
	MetricTolariaRollbackSnapshotsTotal:          true,
	MetricTolariaRollbackFailuresTotal:           true,
	MetricTolariaRollbackFastHitsTotal:           true,
	MetricTolariaRollbackFastMissesTotal:         true,
	MetricTolariaRollbackDeadlineExceededTotal:   true,
	MetricTolariaTimeoutTamiyoTotal:              true,
	MetricTolariaTimeoutKasminaTotal:             true,
	MetricTolariaTimeoutLateDiscardedTotal:       true,
	MetricTolariaErrorTamiyoTotal:                true,
	MetricTolariaErrorKasminaTotal:               true,
	MetricTolariaProfilerTracesEmittedTotal:      true,
	MetricTolariaProfilerTracesFailedTotal:       true,
	MetricTolariaEmergencyHaltsTotal:             true,
	MetricTolariaEmergencyBroadcastsTotal:        true,
	MetricTolariaEmergencyBroadcastFailuresTotal: true,
	MetricTolariaEmergencyBypassAppliedTotal:     true,
	MetricTamiyoGNNCompileFallbackTotal:          true,
	MetricTamiyoFieldReportsPublishedTotal:       true,
	MetricTamiyoFieldReportsRetriesTotal:         true,
	MetricTamiyoFieldReportsDroppedTotal:         true,
}

// IsCounterMetric reports whether the named metric is a running count
// that only grows during a run, such as tolaria.epochs.total or
// tolaria.rollback.snapshots_total: a monitoring system may take its
// rate, and the Prometheus exposition types it as a counter. Every other
// metric is a gauge, the latest value of something that may go up and
// down; that includes the few whose reference name ends in "_total" but
// that are not running counts (tolaria.grad_agg.microbatches_total counts
// one epoch's steps, tamiyo.field_reports.pending_total is a queue
// length).
func IsCounterMetric(name string) bool { return counterMetrics[name] }
