package events

import "time"

// GoOffline decides that a worker silent since lastHeartbeat (nil: never
// heard from) is offline by the rule "silent for threshold". It returns no
// events when the worker is already offline or was heard from in time, so
// running the stuck detector twice changes nothing.
func (u *User) GoOffline(lastHeartbeat *time.Time, threshold time.Duration, inProgress int, now time.Time) []Payload {
	if !u.IsWorker || !u.Online {
		return nil
	}
	if lastHeartbeat != nil && now.Sub(*lastHeartbeat) < threshold {
		return nil
	}
	p := WorkerWentOffline{ThresholdSeconds: int(threshold / time.Second), InProgress: inProgress}
	if lastHeartbeat != nil {
		p.LastHeartbeat = lastHeartbeat.UTC().Format(time.RFC3339Nano)
	}
	return []Payload{p}
}
