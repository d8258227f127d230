package events

import "time"

// GoOffline decides that a worker is offline by the rule "silent for
// threshold": a worker marked online silent since lastHeartbeat, or a worker
// never heard from (no heartbeat ever) that holds tasks and is silent since
// its last claim (lastClaim). It returns no events when the worker is
// already offline or was heard from in time, so running the stuck detector
// twice changes nothing.
func (u *User) GoOffline(lastHeartbeat, lastClaim *time.Time, threshold time.Duration, inProgress int, now time.Time) []Payload {
	if !u.IsWorker {
		return nil
	}
	p := WorkerWentOffline{ThresholdSeconds: int(threshold / time.Second), InProgress: inProgress, Rule: OfflineSilent}
	switch {
	case u.Online:
		if lastHeartbeat != nil && now.Sub(*lastHeartbeat) < threshold {
			return nil
		}
	case u.OfflineSince == nil && lastHeartbeat == nil && inProgress > 0 && lastClaim != nil:
		if now.Sub(*lastClaim) < threshold {
			return nil
		}
		p.Rule, p.LastClaim = OfflineNeverHeard, lastClaim.UTC().Format(time.RFC3339Nano)
	default:
		return nil
	}
	if lastHeartbeat != nil {
		p.LastHeartbeat = lastHeartbeat.UTC().Format(time.RFC3339Nano)
	}
	return []Payload{p}
}

// HeartbeatOffline decides the worker's own "I am going offline" heartbeat.
func (u *User) HeartbeatOffline(inProgress int) []Payload {
	if !u.IsWorker || !u.Online {
		return nil
	}
	return []Payload{WorkerWentOffline{InProgress: inProgress, Rule: OfflineHeartbeatSaidSo}}
}
