import type { ConnectionCap } from './connection-cap.js';

/** Counts this node's sessions only. The gap on 2+ nodes: N nodes admit N × cap sessions per mesh. */
export class LocalConnectionCap implements ConnectionCap {
  private readonly sessions = new Map<string, Set<string>>();

  constructor(private readonly cap: number) {}

  async activate(): Promise<void> {}

  async deactivate(): Promise<void> {}

  async close(): Promise<void> {}

  async admit(meshId: string, sessionId: string): Promise<boolean> {
    let set = this.sessions.get(meshId);
    if (!set) {
      set = new Set();
      this.sessions.set(meshId, set);
    }
    if (set.has(sessionId)) return true;
    if (set.size >= this.cap) return false;
    set.add(sessionId);
    return true;
  }

  /** Every session this node admitted, for the shared cap to take over on a flip. */
  entries(): Array<{ meshId: string; sessionId: string }> {
    return [...this.sessions].flatMap(([meshId, set]) =>
      [...set].map((sessionId) => ({ meshId, sessionId })),
    );
  }

  async release(meshId: string, sessionId: string): Promise<void> {
    const set = this.sessions.get(meshId);
    set?.delete(sessionId);
    if (set?.size === 0) this.sessions.delete(meshId);
  }
}
