/**
 * MCP calls (docs/protocol.md § MCP tools hosted by peers: "the caller gets exactly one mcp.call_result
 * with its own callId"). From `mcp-call` (by the caller: invoke with `callId` and `args`, then ok with
 * `result`, or fail/info with `error`) and `mcp-result` (by the caller session, one per `mcp.call_result`
 * frame it got: `callId`, `result` or `error`):
 * - mcp-result-twice: one call's result frame came to its caller more than once;
 * - mcp-unexpected-result: a result frame for a callId that caller never invoked;
 * - mcp-wrong-result: a call `ok` whose result is not its own: the tool echoes `args.n` as `result.echo`,
 *   so another call's answer (or a garbled one) shows.
 * A call with no result at all (its caller's session died, the broker's timeout) is no anomaly: the
 * outcome is `info`, the call may or may not have run.
 */
import { type HistoryEvent, str } from '../history/format.js';
import type { Anomalies, Checker } from './anomalies.js';

interface Call {
  invoke: number;
  n: unknown;
  ok?: number;
  result?: unknown;
  results: number[];
}

export class McpChecker implements Checker {
  readonly name = 'mcp';
  /** By `process|callId`. */
  private readonly calls = new Map<string, Call>();
  private readonly unexpected: Array<[string, number]> = [];
  private completed = 0;

  add(event: HistoryEvent, line: number): void {
    if (event.f === 'mcp-call') this.call(event, line);
    else if (event.f === 'mcp-result' && event.type === 'ok') {
      const callId = str(event, 'callId', line);
      const call = this.calls.get(`${event.process}|${callId}`);
      if (call) call.results.push(event.index);
      else
        this.unexpected.push([
          `${event.process} got a result for call ${callId}, which it never made`,
          event.index,
        ]);
    }
  }

  private call(event: HistoryEvent, line: number): void {
    const key = `${event.process}|${str(event, 'callId', line)}`;
    if (event.type === 'invoke') {
      const args = event.value.args as { n?: unknown } | undefined;
      this.calls.set(key, { invoke: event.index, n: args?.n, results: [] });
      return;
    }
    this.completed++;
    const call = this.calls.get(key);
    if (call && event.type === 'ok') {
      call.ok = event.index;
      call.result = event.value.result;
    }
  }

  finish(anomalies: Anomalies): string {
    for (const [message, index] of this.unexpected) anomalies.add('mcp-unexpected-result', message, [index]);
    let ok = 0;
    for (const [key, call] of this.calls) {
      const [process, callId] = key.split('|') as [string, string];
      if (call.results.length > 1)
        anomalies.add(
          'mcp-result-twice',
          `${process} got ${call.results.length} results for call ${callId}`,
          [call.invoke, ...call.results],
        );
      if (call.ok === undefined) continue;
      ok++;
      const echo = (call.result as { echo?: unknown } | null | undefined)?.echo;
      if (echo !== call.n)
        anomalies.add(
          'mcp-wrong-result',
          `${process}'s call ${callId} with n=${JSON.stringify(call.n)} got ${JSON.stringify(call.result)}`,
          [call.invoke, call.ok],
        );
    }
    return `${this.calls.size} calls (${ok} ok, ${this.completed - ok} failed or indeterminate), ${this.unexpected.length} stray results`;
  }
}
