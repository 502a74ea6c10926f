package command

import (
	"context"
	"fmt"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/approval"
)

// SlackGroups resolves approver groups with Slack's usergroups.users.list,
// read at each approval so that membership changes apply at once.
type SlackGroups struct{ Client GroupMembersLister }

// GroupMembersLister is the part of *slack.Client SlackGroups uses.
type GroupMembersLister interface {
	GetUserGroupMembersContext(ctx context.Context, group string, opts ...slack.GetUserGroupMembersOption) ([]string, error)
}

var _ approval.Groups = SlackGroups{}

// GroupMembers implements approval.Groups.
func (g SlackGroups) GroupMembers(ctx context.Context, groupID string) ([]string, error) {
	members, err := g.Client.GetUserGroupMembersContext(ctx, groupID)
	if err != nil {
		return nil, fmt.Errorf("slack usergroups.users.list %s: %w", groupID, err)
	}
	return members, nil
}
