// Stands in for the `ws` package when the SDK (dist/client/client.js) runs in a browser (see peer.html's
// import map): the browser's WebSocket has the same onopen/onmessage/onclose/send/close the SDK uses;
// only `terminate` (the SDK's watchdog drops a silent connection) is missing.
export default class BrowserWebSocket extends WebSocket {
  terminate() {
    this.close();
  }
}
