/**
 * The browser's word on the network, for the connection state machine: `offline` suspends the client
 * (a socket cannot work, so do not burn retries), `online` and a page becoming visible again reconnect
 * at once instead of waiting out a backoff (a laptop waking up, a tab brought back). In Node, where
 * there is no `window` to listen on, nothing is watched and `isOffline()` is always false.
 */
export interface NetworkHooks {
  offline(): void;
  online(): void;
  visible(): void;
}

interface BrowserGlobals {
  addEventListener?: (type: string, listener: () => void) => void;
  removeEventListener?: (type: string, listener: () => void) => void;
  navigator?: { onLine?: boolean };
  document?: {
    visibilityState?: string;
    addEventListener(type: string, listener: () => void): void;
    removeEventListener(type: string, listener: () => void): void;
  };
}

const browser = globalThis as BrowserGlobals;

/** True only where the platform says so (a browser whose `navigator.onLine` is false). */
export function isOffline(): boolean {
  return browser.navigator?.onLine === false;
}

/** Starts watching; returns the function that stops. */
export function watchNetwork(hooks: NetworkHooks): () => void {
  if (typeof browser.addEventListener !== 'function') return () => {};
  const offline = () => hooks.offline();
  const online = () => hooks.online();
  const visibility = () => {
    if (browser.document?.visibilityState === 'visible') hooks.visible();
  };
  browser.addEventListener('offline', offline);
  browser.addEventListener('online', online);
  browser.document?.addEventListener('visibilitychange', visibility);
  return () => {
    browser.removeEventListener?.('offline', offline);
    browser.removeEventListener?.('online', online);
    browser.document?.removeEventListener('visibilitychange', visibility);
  };
}
