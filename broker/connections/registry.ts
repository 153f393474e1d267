import type { Connection } from './connection.js';

/**
 * The sockets this node holds, indexed by session, member and mesh. Connections are per node in every
 * phase (docs/design.md §2, row "connections"); the shared modules find local recipients here.
 */
export class ConnectionRegistry {
  private readonly bySessionId = new Map<string, Connection>();
  private readonly byMemberId = new Map<number, Set<Connection>>();
  private readonly byMeshId = new Map<string, Set<Connection>>();
  /** Sockets still waiting for their hello; counted so drain can close them too. */
  private readonly pending = new Set<Connection>();
  /** Of those, how many per source address (the per-address bound on unauthenticated sockets). */
  private readonly pendingByAddress = new Map<string, number>();

  addPending(connection: Connection): void {
    this.pending.add(connection);
    this.pendingByAddress.set(connection.remote, this.pendingFrom(connection.remote) + 1);
  }

  /** Sockets of `address` still waiting for their hello. */
  pendingFrom(address: string): number {
    return this.pendingByAddress.get(address) ?? 0;
  }

  private removePending(connection: Connection): void {
    if (!this.pending.delete(connection)) return;
    const left = this.pendingFrom(connection.remote) - 1;
    if (left > 0) this.pendingByAddress.set(connection.remote, left);
    else this.pendingByAddress.delete(connection.remote);
  }

  /** Registers a connection whose hello was accepted; it must not replace a live one (see `session`). */
  add(connection: Connection): void {
    const identity = connection.identity!;
    this.removePending(connection);
    this.bySessionId.set(identity.sessionId, connection);
    setOf(this.byMemberId, identity.memberId).add(connection);
    setOf(this.byMeshId, identity.meshId).add(connection);
  }

  /**
   * Forgets a closed connection. Returns true when it was the session's current connection (so the
   * session really went away), false when a newer connection had already replaced it.
   */
  remove(connection: Connection): boolean {
    this.removePending(connection);
    const identity = connection.identity;
    if (!identity) return false;
    deleteFrom(this.byMemberId, identity.memberId, connection);
    deleteFrom(this.byMeshId, identity.meshId, connection);
    if (this.bySessionId.get(identity.sessionId) !== connection) return false;
    this.bySessionId.delete(identity.sessionId);
    return true;
  }

  session(sessionId: string): Connection | undefined {
    return this.bySessionId.get(sessionId);
  }

  ofMember(memberId: number): Iterable<Connection> {
    return this.byMemberId.get(memberId) ?? [];
  }

  hasMember(memberId: number): boolean {
    return this.byMemberId.has(memberId);
  }

  /** Members with at least one session on this node. */
  memberIds(): number[] {
    return [...this.byMemberId.keys()];
  }

  ofMesh(meshId: string): Iterable<Connection> {
    return this.byMeshId.get(meshId) ?? [];
  }

  meshSize(meshId: string): number {
    return this.byMeshId.get(meshId)?.size ?? 0;
  }

  /** Every socket, with or without a hello. */
  all(): Connection[] {
    return [...this.pending, ...this.bySessionId.values()];
  }

  /** Every socket of the node, welcomed or still waiting for its hello. */
  get socketCount(): number {
    return this.bySessionId.size + this.pending.size;
  }

  get size(): number {
    return this.bySessionId.size;
  }

  countsByMesh(): Map<string, number> {
    return new Map([...this.byMeshId].map(([meshId, set]) => [meshId, set.size]));
  }
}

function setOf<K, V>(map: Map<K, Set<V>>, key: K): Set<V> {
  let set = map.get(key);
  if (!set) {
    set = new Set();
    map.set(key, set);
  }
  return set;
}

function deleteFrom<K, V>(map: Map<K, Set<V>>, key: K, value: V): void {
  const set = map.get(key);
  if (!set) return;
  set.delete(value);
  if (set.size === 0) map.delete(key);
}
