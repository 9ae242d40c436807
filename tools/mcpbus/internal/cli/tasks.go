package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// newTasksCmd is `mcpbus tasks`: durable tool calls (mcp.v1.task.*).
func newTasksCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "Durable tool calls: run a call as a task, list, read and cancel tasks",
		Long: "A task is a tool call that outlives its caller: its handle comes at once, the call runs on the " +
			"server's owner, and its outcome is kept for the runners' --task-retention. See docs/tasks.md.",
	}
	cmd.AddCommand(newTasksRunCmd(g), newTasksListCmd(g), newTasksGetCmd(g), newTasksCancelCmd(g))
	return cmd
}

func newTasksRunCmd(g *globals) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "run <server>.<tool> ['<json arguments>' | -]",
		Short: "Start a tool call as a task and print its id (--wait: wait for its result)",
		Example: `  mcpbus tasks run everything.longRunningOperation '{"duration":30,"steps":5}'
  mcpbus tasks run slow.sleep '{"ms":30000}' --wait`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			server, tool, raw, err := toolCallArgs(g, args)
			if err != nil {
				return err
			}
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			task, err := c.CreateTask(ctx, server, tool, raw)
			cancel()
			if err != nil {
				return err
			}
			if !wait {
				if g.json {
					return g.printJSON(task)
				}
				_, err := fmt.Fprintln(g.stdout, task.ID)
				return err
			}
			fmt.Fprintln(g.stderr, "task", task.ID)
			return waitTask(cmd.Context(), g, c, task.ID)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the task to end and print its result (Ctrl-C stops waiting, not the task)")
	return cmd
}

// waitTask asks for a task's result until it is final, then prints it.
func waitTask(ctx context.Context, g *globals, c *client.Client, id string) error {
	for lost := 0; ; {
		task, err := c.TaskResult(ctx, id, model.TaskMaxWait/2)
		if apierr.Of(err) == apierr.Network && ctx.Err() == nil && lost < 3 {
			// No reply: a runner that went away as it was asked (another
			// answers the next ask). Three in a row: the bus is gone.
			lost++
			time.Sleep(time.Second)
			continue
		}
		lost = 0
		if err != nil {
			return err
		}
		if model.TaskFinal(task.State) {
			return printTask(g, task)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// printTask prints a final task: its result, or why it has none.
func printTask(g *globals, t model.Task) error {
	switch {
	case g.json:
		return g.printJSON(t)
	case t.State == model.TaskCompleted:
		return printResult(g, t.Result)
	case t.Error != nil:
		return t.Error
	}
	return apierr.Newf(apierr.ServiceUnavailable, "task %s: %s %s", t.ID, t.State, t.Message)
}

func newTasksListCmd(g *globals) *cobra.Command {
	var state string
	var all bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your tasks, newest first",
		Example: `  mcpbus tasks ls
  mcpbus tasks ls --state working --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			list, err := c.Tasks(ctx, state, all)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(model.TaskListReply{Tasks: list})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tTOOL\tCREATED\tMESSAGE")
			for _, t := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.State, t.Name, t.CreatedAt.Local().Format(time.DateTime), oneLine(taskMessage(t), 50))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only tasks in this state: working, completed, failed, cancelled")
	cmd.Flags().BoolVar(&all, "all", false, "every principal's tasks (admins)")
	return cmd
}

func newTasksGetCmd(g *globals) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "get <id>",
		Short: "Show a task (a working one with its progress); a final one with its result (--wait: wait that long for it to end)",
		Example: `  mcpbus tasks get 0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e
  mcpbus tasks get 0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e --wait 30s --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			task, err := c.TaskResult(cmd.Context(), args[0], wait)
			if err != nil {
				return err
			}
			if model.TaskFinal(task.State) {
				return printTask(g, task)
			}
			if g.json {
				return g.printJSON(task)
			}
			_, err = fmt.Fprintf(g.stdout, "%s %s (attempt %d on runner %s, since %s)\n", task.ID, task.State, task.Attempts, task.Runner,
				task.CreatedAt.Local().Format(time.DateTime))
			if err == nil && task.Progress != nil {
				_, err = fmt.Fprintf(g.stdout, "progress: %s\n", task.Progress)
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long (at most 60s) for the task to end")
	return cmd
}

// taskMessage is the MESSAGE of a listed task: a working one's progress,
// else why it failed or was cancelled.
func taskMessage(t model.Task) string {
	if t.State == model.TaskWorking && t.Progress != nil {
		return t.Progress.String()
	}
	return t.Message
}

func newTasksCancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "cancel <id>",
		Short:   "Cancel a working task (its server gets notifications/cancelled)",
		Example: `  mcpbus tasks cancel 0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			task, err := c.CancelTask(ctx, args[0])
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(task)
			}
			_, err = fmt.Fprintln(g.stdout, task.ID, task.State)
			return err
		},
	}
}
