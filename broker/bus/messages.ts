/**
 * Every message the nodes send each other over the bus, as one discriminated union keyed by `kind`: the
 * payload type of each kind is written once, here, and both the publisher and the handlers are checked
 * against it. Payloads are hints (docs/design.md §2): nothing a node must not lose rides only on the bus.
 */
// The frames carried are the protocol's own types (the rows alias them: ClockTickFrame, PresenceFrame,
// StreamDataFrame): the bus sits below the rows and names none of them.
import type {
  ClockTick,
  DurableFrame,
  PeerJoined,
  PeerLeft,
  PeerStatus,
  StreamData,
} from '../../protocol/frames.js';

/** An MCP call on its way to the node holding the host's socket. */
export interface McpInvoke {
  invokeId: string;
  callerNode: string;
  hostSession: string;
  server: string;
  frame: { type: 'mcp.invoke'; callId: string; server: string; tool: string; args: unknown; caller: string };
}

/** The payload of each kind. Mesh channel: the scope is a mesh id; node channel: a node id. */
export interface BusPayloads {
  /**
   * Node (a DM or group message: the nodes holding a recipient session) or mesh (a broadcast): wake the
   * recipients' feeds. The frame and seqs are a hint; a feed writes them only when next in line.
   */
  'delivery.wake': { frame: DurableFrame; seqs: Array<[number, number]>; publishedAt: number };
  /** Mesh: a presence event for the receiving node's sockets of the mesh. */
  'presence.event': PeerJoined | PeerLeft | PeerStatus;
  /** Node: close the receiving node's socket of a session that connected again elsewhere. */
  'presence.kick': { sessionId: string };
  /** Mesh: a tick of the mesh clock for the receiving node's sockets. */
  'clock.tick': ClockTick;
  /**
   * Mesh: a member was revoked; the receiving node closes its sessions and, with `reportTo` (the node
   * whose admin API revoked it), answers there with `member.revoked.closed`.
   */
  'member.revoked': { memberId: number; reportTo?: string };
  /** Node: how many sessions of the revoked member the sending node closed (the admin's report). */
  'member.revoked.closed': { memberId: number; node: string; closed: number };
  /** Mesh: a stream publish for the receiving node's subscribers (publishedAt: fan-out latency). */
  'stream.data': StreamData & { publishedAt: number };
  /** Node: an MCP call for a host session on the receiving node. */
  'mcp.invoke': McpInvoke;
  /** Node: the answer to an MCP call the receiving node is waiting for. */
  'mcp.result': { invokeId: string; outcome: { result?: unknown; error?: string } };
}

export type BusKind = keyof BusPayloads;

/** One bus message: the discriminated union of every kind with its payload. */
export type BusMessage = { [K in BusKind]: { kind: K; payload: BusPayloads[K] } }[BusKind];

export type BusHandler<K extends BusKind> = (scope: string, payload: BusPayloads[K]) => void;

/** A handler of one kind, as a row declares it (see RowParts.relays). */
export type BusRelay = { [K in BusKind]: { kind: K; handle: BusHandler<K> } }[BusKind];
