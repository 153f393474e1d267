/** Remembers the last `capacity` ids seen, oldest forgotten first: the SDK's duplicate filter. */
export class RecentIds {
  private readonly ids = new Set<string>();

  constructor(private readonly capacity = 10_000) {}

  has(id: string): boolean {
    return this.ids.has(id);
  }

  /** True the first time `id` is seen (and remembers it), false for a repeat. */
  add(id: string): boolean {
    if (this.ids.has(id)) return false;
    this.ids.add(id);
    if (this.ids.size > this.capacity) this.ids.delete(this.ids.values().next().value!);
    return true;
  }
}
