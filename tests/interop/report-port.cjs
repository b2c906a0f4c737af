// Preloaded into Node test peers (node -r ./report-port.cjs ...) so a
// server started with PORT=0 tells the test which port it really bound:
// every listening socket prints "LISTENING_PORT=<port>" on stderr.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  this.once("listening", () => {
    const address = this.address();
    if (address && typeof address === "object") {
      process.stderr.write(`LISTENING_PORT=${address.port}\n`);
    }
  });
  return listen.apply(this, args);
};
