// Preloaded into Node test peers that listen on every interface (e.g. the
// ext-apps example servers: express's app.listen(PORT)) so that they bind
// 127.0.0.1 instead: a listen() without a host, or with 0.0.0.0 / ::, gets
// host 127.0.0.1. Combine with report-port.cjs to learn the port of PORT=0:
//
// Usage: PORT=0 node -r ./listen-loopback.cjs -r ./report-port.cjs SERVER.js
const net = require("net");
const listen = net.Server.prototype.listen;
const ANY = new Set([undefined, null, "", "0.0.0.0", "::"]);
const isPort = (value) => typeof value === "number" || (typeof value === "string" && /^\d+$/.test(value));
net.Server.prototype.listen = function (...args) {
  const [first, second] = args;
  if (isPort(first)) {
    if (typeof second !== "string") args.splice(1, 0, "127.0.0.1");
    else if (ANY.has(second)) args[1] = "127.0.0.1";
  } else if (first && typeof first === "object" && !(first instanceof net.Server) && first.path === undefined
    && first.fd === undefined && first.handle === undefined && first._handle === undefined && ANY.has(first.host)) {
    args[0] = { ...first, host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};
