package leyline

// SignalHistoryLength is how many recent losses and accuracies
// TrainingSignals carries (G2: the last 5).
const SignalHistoryLength = 5

// TrainingMetrics are one epoch's host training figures (G2
// leyline/signals.py TrainingMetrics). Accuracies are on the 0–100 scale.
type TrainingMetrics struct {
	Epoch      int
	GlobalStep int
	TrainLoss  float64
	ValLoss    float64
	// LossDelta is previous − current validation loss: positive means
	// the loss improved.
	LossDelta     float64
	TrainAccuracy float64
	ValAccuracy   float64
	// AccuracyDelta is current − previous validation accuracy.
	AccuracyDelta float64
	// PlateauEpochs counts consecutive epochs without a meaningful
	// accuracy gain.
	PlateauEpochs int
	// HostStabilized is 1 once the host has stabilised (a latch: it never
	// goes back to 0), else 0.
	HostStabilized  int
	BestValAccuracy float64
	BestValLoss     float64
}

// TrainingSignals is what a controller sees of an environment each epoch
// (G2 TrainingSignals): the metrics, the live seeds, the free slots, a
// summary of the most advanced seed and the recent histories.
type TrainingSignals struct {
	Metrics TrainingMetrics
	// ActiveSeeds are the ids of the live seeds.
	ActiveSeeds []string
	// AvailableSlots is the number of enabled slots without a seed.
	AvailableSlots int
	// SummarySeedID is the summary seed's id; "" when there is none and
	// the other summary fields are meaningless.
	SummarySeedID            string
	SummarySeedStage         SeedStage
	SummarySeedEpochsInStage int
	SummarySeedAlpha         float64
	SummarySeedImprovement   float64
	// LossHistory and AccuracyHistory hold up to SignalHistoryLength recent
	// validation losses and accuracies, oldest first.
	LossHistory     []float64
	AccuracyHistory []float64
}

// RecentHistory returns the last SignalHistoryLength values of h (all of
// them when there are fewer), oldest first.
func RecentHistory(h []float64) []float64 {
	if len(h) > SignalHistoryLength {
		h = h[len(h)-SignalHistoryLength:]
	}
	return append([]float64(nil), h...)
}
