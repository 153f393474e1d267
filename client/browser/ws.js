// Stands in for the `ws` package in the browser build (vite.browser.config.ts): the browser's WebSocket has
// the same onopen/onmessage/onclose/send/close/readyState the SDK uses; only `terminate` (the SDK's watchdog
// drops a silent connection) is missing, and closing is the nearest a page can do.
export default class BrowserWebSocket extends WebSocket {
  terminate() {
    this.close();
  }
}
