package actions

// RemotePortCollision rebuilds the error an agent reported for a refused
// exposure from the collision it sent and its text, so that
// errors.Is(err, ErrPortCollision) and errors.As into *PortCollisionError
// hold on the bot's side too.
func RemotePortCollision(c PortCollision, text string) *PortCollisionError {
	pc := &PortCollisionError{PortCollision: c, remote: text}
	if len(pc.Ports) > 0 {
		pc.NodePort = pc.Ports[0].NodePort
	}
	if pc.remote == "" {
		pc.remote = ErrPortCollision.Error() + ": node port " + c.String()
	}
	return pc
}
