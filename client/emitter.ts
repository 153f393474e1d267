/** A small typed event emitter with no Node dependency, so the SDK also runs in a browser. */
export class Emitter<Events extends object> {
  private readonly listeners = new Map<keyof Events, Set<(payload: never) => void>>();

  on<K extends keyof Events>(event: K, listener: (payload: Events[K]) => void): () => void {
    let set = this.listeners.get(event);
    if (!set) {
      set = new Set();
      this.listeners.set(event, set);
    }
    set.add(listener as (payload: never) => void);
    return () => this.off(event, listener);
  }

  off<K extends keyof Events>(event: K, listener: (payload: Events[K]) => void): void {
    this.listeners.get(event)?.delete(listener as (payload: never) => void);
  }

  /**
   * Resolves with the next payload of `event` that satisfies `predicate`, or rejects after `timeoutMs`.
   * Useful to wait on a signal instead of sleeping.
   */
  next<K extends keyof Events>(
    event: K,
    predicate: (payload: Events[K]) => boolean = () => true,
    timeoutMs = 10_000,
  ): Promise<Events[K]> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for "${String(event)}"`));
      }, timeoutMs);
      const off = this.on(event, (payload) => {
        if (!predicate(payload)) return;
        clearTimeout(timer);
        off();
        resolve(payload);
      });
    });
  }

  protected listenerCount(event: keyof Events): number {
    return this.listeners.get(event)?.size ?? 0;
  }

  protected emit<K extends keyof Events>(event: K, payload: Events[K]): void {
    for (const listener of [...(this.listeners.get(event) ?? [])]) {
      (listener as (payload: Events[K]) => void)(payload);
    }
  }
}
