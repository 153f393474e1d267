/** Frames the broker sends, as the SDK types them (PROTOCOL.md). */
export interface Welcome {
  type: 'welcome';
  v: 1;
  meshId: string;
  sessionId: string;
  node: string;
  resumed: boolean;
  heartbeatMs: number;
}

export interface Message {
  type: 'message';
  messageId: string;
  id: string;
  from: string;
  fromSession: string;
  to: string;
  body: string;
  sentAt: string;
  [extra: string]: unknown;
}

/** A durable notification that a URL watch of this member triggered (acked like a message). */
export interface WatchTriggered {
  type: 'watch.triggered';
  messageId: string;
  watchId: string;
  url: string;
  oldValue: string | null;
  newValue: string;
  sentAt: string;
}

export interface Sent {
  type: 'sent';
  id: string;
  messageId: string;
  recipients: number;
}

export interface Peer {
  pubkey: string;
  sessionId: string;
  name: string | null;
  groups: string[];
  node: string;
  connectedAt: string;
}

export interface PeerJoined {
  type: 'peer.joined';
  pubkey: string;
  sessionId: string;
  name: string | null;
}

export interface PeerLeft {
  type: 'peer.left';
  pubkey: string;
  sessionId: string;
}

export interface ErrorFrame {
  type: 'error';
  code: string;
  message: string;
  rid?: string;
}

/** Any frame; features without a typed helper (streams, clock, …) arrive as this. */
export interface Frame {
  type: string;
  rid?: string;
  [field: string]: unknown;
}
