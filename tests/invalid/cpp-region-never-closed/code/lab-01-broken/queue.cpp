// region queue
struct Queue {
  bool push(int x) { return x > 0; }
};

int main() { return Queue{}.push(1) ? 0 : 1; }
