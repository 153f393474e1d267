/**
 * The one inbound path: every row reaches this node's sockets through these sinks (broker/rows/context.ts).
 * A frame for many sockets (ticks, presence events, stream data) is serialized once, not per socket:
 * fan-out is the hottest path of a node.
 */
import { CloseCode } from '../../protocol/errors.js';
import type { AuditLog } from '../audit/audit.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import type { PresenceFrame } from '../presence/presence.js';
import type { Sinks } from '../rows/context.js';

/** What the presence sinks reach once the rows and the peer side exist (they are built with the sinks). */
export interface PresenceFollowUps {
  audit?: AuditLog;
  sessionEnded?: (meshId: string, sessionId: string) => Promise<void>;
}

export function createSinks(
  connections: ConnectionRegistry,
  nodeId: string,
  later: PresenceFollowUps,
): Sinks {
  const toMesh = (meshId: string, frame: object, exceptSession?: string) => {
    const text = JSON.stringify(frame);
    for (const connection of connections.ofMesh(meshId)) {
      if (connection.identity?.sessionId !== exceptSession) connection.sendText(text);
    }
  };
  // Presence events this node originates also audit and, on a leave, end what the session held here.
  const presenceEvents = (meshId: string, frame: PresenceFrame) => {
    toMesh(meshId, frame, frame.sessionId);
    if (frame.type === 'peer.status') return;
    later.audit?.record({
      meshId,
      eventType: frame.type,
      actor: frame.pubkey,
      payload: { sessionId: frame.sessionId, node: nodeId },
    });
    if (frame.type === 'peer.left') void later.sessionEnded?.(meshId, frame.sessionId);
  };
  return {
    presenceEvents,
    presenceRelay: (meshId, frame) => {
      toMesh(meshId, frame, frame.sessionId);
      // A session's end announced by another node: its grace may have run out there (it moved, then
      // left), or another node's reaper deleted the row before this node's grace timer fired. Either way
      // this node may still hold something of it (a stream subscription, a hosted MCP server, a watch), so
      // it ends what it holds too. The shared state was cleaned where the leave originated; these hooks
      // are idempotent there. A session connected here again is alive: nothing of it ends.
      if (frame.type === 'peer.left' && !connections.session(frame.sessionId))
        void later.sessionEnded?.(meshId, frame.sessionId);
    },
    kickLocal: (sessionId) =>
      connections
        .session(sessionId)
        ?.close(CloseCode.sessionReplaced, 'session replaced by a newer connection'),
    toSession: (sessionId, frame) => connections.session(sessionId)?.send(frame),
    toMesh,
    streams: (sessionIds, frame) => {
      const text = JSON.stringify(frame);
      for (const sessionId of sessionIds) connections.session(sessionId)?.sendText(text);
    },
  };
}
