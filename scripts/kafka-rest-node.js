// Confluent's own Node client for REST Proxy (npm kafka-rest 0.0.5, installed by
// scripts/clients.sh) producing to floodgate as its users write it: binary messages through
// Topic.produce and Partition.produce (strings, Buffers, keyed records, a null value), and
// JSON documents through a Schema of the client's kind (its documented extension point: a
// content type, no schema sent). The client speaks REST Proxy's v1 API: it sends
// "key": null and "partition": null with every record produced to a topic.
//   NODE_PATH=DIR/node/node_modules node scripts/kafka-rest-node.js URL API_KEY TOPIC
// Prints each produce answer as one JSON line; exits 1 on the first error.
"use strict";

const util = require("util");
const KafkaRest = require("kafka-rest");

const [url, key, topicName] = process.argv.slice(2);
if (!url || !key || !topicName) {
  console.error("usage: kafka-rest-node.js URL API_KEY TOPIC");
  process.exit(2);
}

// JSON documents: the client's Schema with the json embedded format's content type. No schema
// text (undefined is left out of the request body), as REST Proxy's JSON format takes none.
function JsonSchema() {
  KafkaRest.Schema.call(this);
}
util.inherits(JsonSchema, KafkaRest.Schema);
JsonSchema.prototype.getContentType = function (client) {
  return "application/vnd.kafka.json.v" + client.config.version + "+json";
};
JsonSchema.prototype.toSchemaString = function () {
  return undefined;
};

const kafka = new KafkaRest({ url: url, headers: { Authorization: "Bearer " + key } });
const topic = kafka.topic(topicName);

const steps = [
  (done) => topic.produce("binary-1", done),
  (done) => topic.produce({ key: "key-2", value: "binary-2" }, { key: "key-3", value: Buffer.from([0, 1, 2, 255]) }, done),
  (done) => topic.produce({ key: "key-4", value: null }, done),
  (done) => topic.produce([{ partition: 0, value: "binary-5" }, "binary-6"], done),
  (done) => kafka.topicPartition(topicName, 0).produce({ key: "key-7", value: "binary-7" }, done),
  (done) => topic.produce(new JsonSchema(), { order: 8, items: ["a", "b"] }, { key: "key-9", value: { order: 9, ok: true } }, done),
];

function run(i) {
  if (i === steps.length) return;
  steps[i]((err, res) => {
    if (err) {
      console.error("step " + i + ": " + (err.toString ? err.toString() : err) + " " + JSON.stringify(err.data || {}));
      process.exit(1);
    }
    console.log(JSON.stringify({ step: i, answer: res }));
    run(i + 1);
  });
}
run(0);
